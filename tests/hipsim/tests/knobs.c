/* Test knobs: counters, live counts, fault injection, quirks, latency, device count.
 * argv[1] selects a scenario; the env-* scenarios expect the matching HIPSIM_* variable. */
#include "check.h"

static hipGraphNode_t kernel_node(hipGraph_t g, hipFunction_t fill, int extra_style, void *dst) {
    static fill_args_t fa;
    static size_t size = 24;
    static void *extra[5];
    static uint32_t v = 0x1234;
    static uint64_t n = 16;
    static void *dstp;
    dstp = dst;
    void *params[] = {&dstp, &v, &n};
    fa = (fill_args_t){dst, 0x1234, 0, 16};
    extra[0] = HIP_LAUNCH_PARAM_BUFFER_POINTER; extra[1] = &fa;
    extra[2] = HIP_LAUNCH_PARAM_BUFFER_SIZE; extra[3] = &size; extra[4] = HIP_LAUNCH_PARAM_END;
    hipKernelNodeParams p;
    memset(&p, 0, sizeof p);
    p.func = fill;
    p.gridDim = (dim3){1, 1, 1};
    p.blockDim = (dim3){1, 1, 1};
    if (extra_style) p.extra = extra; else p.kernelParams = params;
    hipGraphNode_t node;
    CHECK(hipGraphAddKernelNode(&node, g, NULL, 0, &p));
    return node;
}

/* clr138: kernelParams point at garbage. */
static void check_quirks(int clr138) {
    hipModule_t m = load_module();
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
    void *d;
    CHECK(hipMalloc(&d, 64));
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    hipGraphNode_t kp = kernel_node(g, fill, 0, d), ex = kernel_node(g, fill, 1, d);
    hipKernelNodeParams p;
    CHECK(hipGraphKernelNodeGetParams(kp, &p));
    if (clr138) {
        EXPECT(p.kernelParams != NULL && p.extra == NULL);
        EXPECT(*(void **)p.kernelParams[0] != d && *(uint32_t *)p.kernelParams[1] != 0x1234);
        CHECK(hipGraphKernelNodeGetParams(ex, &p)); /* extra-style nodes are unaffected */
        EXPECT(((fill_args_t *)p.extra[1])->value == 0x1234);
    } else {
        EXPECT(p.kernelParams != NULL && *(void **)p.kernelParams[0] == d && *(uint32_t *)p.kernelParams[1] == 0x1234);
    }
    /* Either way the node itself still computes the right thing. */
    hipGraphExec_t e;
    CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
    CHECK(hipGraphLaunch(e, NULL));
    uint32_t host[16];
    CHECK(hipMemcpy(host, d, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(host, 16, 0x1234);
    CHECK(hipGraphExecDestroy(e));
    CHECK(hipGraphDestroy(g));
    CHECK(hipFree(d));
    CHECK(hipModuleUnload(m));
}

/* Exec setter of a fill node (extra style): fill `dst` with `v`. */
static hipError_t set_fill(hipGraphExec_t e, hipGraphNode_t node, hipFunction_t fill, void *dst, uint32_t v) {
    fill_args_t fa = {dst, v, 0, 16};
    size_t size = sizeof fa;
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &fa, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
    hipKernelNodeParams p;
    memset(&p, 0, sizeof p);
    p.func = fill;
    p.gridDim = (dim3){1, 1, 1};
    p.blockDim = (dim3){1, 1, 1};
    p.extra = extra;
    return hipGraphExecKernelNodeSetParams(e, node, &p);
}

static uint32_t first_word(void *d) {
    uint32_t host[16];
    CHECK(hipMemcpy(host, d, sizeof host, hipMemcpyDeviceToHost));
    return host[0];
}

/* The kernel-argument staging model: a fill node (24 argument bytes: a 32-byte slot plus 256
 * hidden) and a memset node (64 + 256) take 608 bytes at instantiation; updates take nothing
 * without the quirks, a fresh slot each with them, until the pool is exhausted: then an error
 * (kernarg_leak) or success with the old parameters kept (kernarg_leak_silent). */
static void check_kernarg(void) {
    const uint64_t kernel_slot = 32 + 256, graph_slots = kernel_slot + 64 + 256;
    hipModule_t m = load_module();
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
    void *d, *d2;
    CHECK(hipMalloc(&d, 64));
    CHECK(hipMalloc(&d2, 64));
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    hipGraphNode_t k = kernel_node(g, fill, 1, d), ms;
    hipMemsetParams mp;
    memset(&mp, 0, sizeof mp);
    mp.dst = d2; mp.elementSize = 4; mp.width = 1; mp.height = 1; mp.value = 9;
    CHECK(hipGraphAddMemsetNode(&ms, g, &k, 1, &mp));
    uint64_t before = hipsimLiveCount("kernarg");
    hipGraphExec_t e;
    CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
    EXPECT(hipsimLiveCount("kernarg") == before + graph_slots);
    for (uint32_t v = 1; v <= 5; v++) CHECK(set_fill(e, k, fill, d, v));
    EXPECT(hipsimLiveCount("kernarg") == before + graph_slots); /* slots reused */

    hipsimSetKernargPool(before + graph_slots + 2 * kernel_slot);
    EXPECT(hipsimLiveCount("kernarg_peak") == before + graph_slots);
    EXPECT(hipsimSetQuirks("kernarg_leak") == 0);
    CHECK(set_fill(e, k, fill, d, 100));
    CHECK(set_fill(e, k, fill, d, 101));
    EXPECT(hipsimLiveCount("kernarg") == before + graph_slots + 2 * kernel_slot);
    EXPECT_ERR(set_fill(e, k, fill, d, 102), hipErrorOutOfMemory);
    CHECK(hipGraphLaunch(e, NULL));
    EXPECT(first_word(d) == 101); /* the failed update changed nothing */
    EXPECT(hipsimSetQuirks("kernarg_leak_silent") == 0);
    CHECK(set_fill(e, k, fill, d, 103)); /* reports success... */
    CHECK(hipGraphLaunch(e, NULL));
    EXPECT(first_word(d) == 101); /* ...and runs the old parameters */
    EXPECT(hipsimLiveCount("kernarg_peak") == before + graph_slots + 2 * kernel_slot);

    /* An instantiation that does not fit fails; destroying gives every slot back. */
    hipGraphExec_t e2;
    EXPECT_ERR(hipGraphInstantiate(&e2, g, NULL, NULL, 0), hipErrorOutOfMemory);
    CHECK(hipGraphExecDestroy(e));
    EXPECT(hipsimLiveCount("kernarg") == before);
    CHECK(hipGraphInstantiate(&e2, g, NULL, NULL, 0));
    CHECK(set_fill(e2, k, fill, d, 104));
    CHECK(hipGraphLaunch(e2, NULL));
    EXPECT(first_word(d) == 104);
    CHECK(hipGraphExecDestroy(e2));
    EXPECT(hipsimSetQuirks("") == 0);
    hipsimSetKernargPool(UINT64_MAX);
    CHECK(hipGraphDestroy(g));
    CHECK(hipFree(d));
    CHECK(hipFree(d2));
    CHECK(hipModuleUnload(m));
}

static hipGraphNode_t memset_node(hipGraph_t g, const hipGraphNode_t *deps, size_t n, void *dst, uint32_t v) {
    hipMemsetParams mp;
    memset(&mp, 0, sizeof mp);
    mp.dst = dst; mp.elementSize = 4; mp.width = 1; mp.height = 1; mp.value = v;
    hipGraphNode_t node;
    CHECK(hipGraphAddMemsetNode(&node, g, deps, n, &mp));
    return node;
}

/* The bytes an executable graph of `g` takes at instantiation and with one update of `node`. */
static void staged(hipGraph_t g, hipGraphNode_t node, void *dst, uint64_t at_instantiation, uint64_t per_update) {
    uint64_t before = hipsimLiveCount("kernarg");
    hipGraphExec_t e;
    CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
    EXPECT(hipsimLiveCount("kernarg") == before + at_instantiation);
    hipMemsetParams mp;
    memset(&mp, 0, sizeof mp);
    mp.dst = dst; mp.elementSize = 4; mp.width = 1; mp.height = 1; mp.value = 7;
    CHECK(hipGraphExecMemsetNodeSetParams(e, node, &mp));
    EXPECT(hipsimLiveCount("kernarg") == before + at_instantiation + per_update);
    CHECK(hipGraphExecDestroy(e));
    EXPECT(hipsimLiveCount("kernarg") == before);
}

/* The bytes an update of executable graph `e` takes: `update` run once. */
#define UPDATE_BYTES(update) \
    ({ uint64_t before_ = hipsimLiveCount("kernarg"); CHECK(update); hipsimLiveCount("kernarg") - before_; })

/* clr_chain_staging: only a graph that is one chain stages anything, at instantiation and on
 * update, and only the nodes clr captures: kernel nodes (a fill: 32 + 256 bytes), and memset
 * nodes (64 + 256) only where `blit` says the version captures them (6.4 and later; not 6.2 and
 * 6.3); independent nodes, a fork and a join stage nothing; a chain's child graph stages, at
 * instantiation and when the child-graph node is updated, only if it is a chain too, and
 * hipGraphExecUpdate stages the graph's own nodes again, not a child graph's. */
static void check_chain_staging(int blit) {
    const uint64_t kernel_slot = 32 + 256, memset_slot = blit ? 64 + 256 : 0;
    hipModule_t m = load_module();
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
    void *d;
    CHECK(hipMalloc(&d, 64));
    int *w = d;
    EXPECT(hipsimSetQuirks("kernarg_leak,clr_chain_staging") == 0);
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    hipGraphNode_t a = memset_node(g, NULL, 0, w, 1), b = memset_node(g, NULL, 0, w + 1, 2);
    staged(g, a, w, 0, 0);
    CHECK(hipGraphAddDependencies(g, &a, &b, 1)); /* a chain: a, then b */
    staged(g, a, w, 2 * memset_slot, memset_slot);
    hipGraphNode_t c = memset_node(g, &a, 1, w + 2, 3); /* a fork: b and c after a */
    staged(g, a, w, 0, 0);
    CHECK(hipGraphDestroy(g));
    CHECK(hipGraphCreate(&g, 0));
    a = memset_node(g, NULL, 0, w, 1);
    b = memset_node(g, NULL, 0, w + 1, 2);
    hipGraphNode_t ab[] = {a, b};
    memset_node(g, ab, 2, w + 2, 3); /* a join: after a and b */
    staged(g, a, w, 0, 0);
    CHECK(hipGraphDestroy(g));

    /* A chain of a kernel node and a memset node: the kernel's slot on every version. */
    CHECK(hipGraphCreate(&g, 0));
    hipGraphNode_t k = kernel_node(g, fill, 1, d);
    a = memset_node(g, &k, 1, w + 1, 2);
    staged(g, a, w, kernel_slot + memset_slot, memset_slot);
    hipGraphExec_t e;
    CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
    EXPECT(UPDATE_BYTES(set_fill(e, k, fill, d, 5)) == kernel_slot);
    hipGraphExecUpdateResult result;
    hipGraphNode_t error_node;
    EXPECT(UPDATE_BYTES(hipGraphExecUpdate(e, g, &error_node, &result)) == kernel_slot + memset_slot);
    CHECK(hipGraphExecDestroy(e));
    CHECK(hipGraphDestroy(g));

    /* A chain of a memset node and a child graph: of two independent memset nodes, which stages
     * nothing, or of a chain of a kernel node and a memset node, which stages like the graph
     * itself; hipGraphExecUpdate stages the memset node alone. */
    hipGraph_t independent, chain;
    CHECK(hipGraphCreate(&independent, 0));
    memset_node(independent, NULL, 0, w + 1, 2);
    memset_node(independent, NULL, 0, w + 2, 3);
    CHECK(hipGraphCreate(&chain, 0));
    k = kernel_node(chain, fill, 1, d);
    memset_node(chain, &k, 1, w + 2, 3);
    hipGraph_t children[] = {independent, chain};
    for (int i = 0; i < 2; i++) {
        uint64_t child_slots = i ? kernel_slot + memset_slot : 0;
        CHECK(hipGraphCreate(&g, 0));
        a = memset_node(g, NULL, 0, w, 1);
        CHECK(hipGraphAddChildGraphNode(&c, g, &a, 1, children[i]));
        staged(g, a, w, memset_slot + child_slots, memset_slot);
        CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
        EXPECT(UPDATE_BYTES(hipGraphExecChildGraphNodeSetParams(e, c, children[i])) == child_slots);
        EXPECT(UPDATE_BYTES(hipGraphExecUpdate(e, g, &error_node, &result)) == memset_slot);
        CHECK(hipGraphExecDestroy(e));
        CHECK(hipGraphDestroy(g));
    }
    CHECK(hipGraphDestroy(independent));
    CHECK(hipGraphDestroy(chain));
    /* Without the quirk every graph stages every node, child graphs' included. */
    EXPECT(hipsimSetQuirks("kernarg_leak") == 0);
    CHECK(hipGraphCreate(&g, 0));
    a = memset_node(g, NULL, 0, w, 1);
    memset_node(g, NULL, 0, w + 1, 2);
    staged(g, a, w, 2 * (64 + 256), 64 + 256);
    CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
    EXPECT(UPDATE_BYTES(hipGraphExecUpdate(e, g, &error_node, &result)) == 2 * (64 + 256));
    CHECK(hipGraphExecDestroy(e));
    CHECK(hipGraphDestroy(g));
    EXPECT(hipsimSetQuirks("") == 0);
    CHECK(hipFree(d));
    CHECK(hipModuleUnload(m));
}

static double time_get_device(void) {
    int d;
    double t0 = now_ms();
    CHECK(hipGetDevice(&d));
    return now_ms() - t0;
}

static void api(void) {
    /* Counters. */
    int d;
    hipsimResetCallCounts();
    for (int i = 0; i < 3; i++) CHECK(hipGetDevice(&d));
    EXPECT(hipsimGetCallCount("hipGetDevice") == 3);
    EXPECT(hipsimGetCallCount("hipMalloc") == 0);
    EXPECT(hipsimGetCallCount("noSuchFunction") == 0);
    hipsimResetCallCounts();
    EXPECT(hipsimGetCallCount("hipGetDevice") == 0);

    /* Live counts balance across create/destroy of every kind. */
    const char *kinds[] = {"alloc", "physical", "reservation", "mapping", "stream", "event", "graph", "exec", "module"};
    uint64_t before[9];
    for (int i = 0; i < 9; i++) before[i] = hipsimLiveCount(kinds[i]);
    EXPECT(hipsimLiveCount("bogus") == UINT64_MAX);
    void *p;
    hipStream_t s;
    hipEvent_t ev;
    hipGraph_t g;
    hipGraphExec_t ge;
    hipModule_t m;
    prop6_t prop;
    memset(&prop, 0, sizeof prop);
    prop.type = hipMemAllocationTypePinned;
    prop.location.type = hipMemLocationTypeDevice;
    hipMemGenericAllocationHandle_t h;
    void *va;
    CHECK(hipMalloc(&p, 16));
    CHECK(hipMemCreate(&h, 2 << 20, (const hipMemAllocationProp *)&prop, 0));
    CHECK(hipMemAddressReserve(&va, 2 << 20, 0, NULL, 0));
    CHECK(hipMemMap(va, 2 << 20, 0, h, 0));
    CHECK(hipStreamCreate(&s));
    CHECK(hipEventCreate(&ev));
    CHECK(hipGraphCreate(&g, 0));
    CHECK(hipGraphInstantiate(&ge, g, NULL, NULL, 0));
    CHECK(hipModuleLoadData(&m, "hipsim"));
    for (int i = 0; i < 9; i++) EXPECT(hipsimLiveCount(kinds[i]) == before[i] + 1);
    CHECK(hipModuleUnload(m));
    CHECK(hipGraphExecDestroy(ge));
    CHECK(hipGraphDestroy(g));
    CHECK(hipEventDestroy(ev));
    CHECK(hipStreamDestroy(s));
    CHECK(hipMemUnmap(va, 2 << 20));
    CHECK(hipMemAddressFree(va, 2 << 20));
    CHECK(hipMemRelease(h));
    CHECK(hipFree(p));
    for (int i = 0; i < 9; i++) EXPECT(hipsimLiveCount(kinds[i]) == before[i]);
    EXPECT(hipsimGetCallCount("hipMalloc") == 1 && hipsimGetCallCount("hipFree") == 1);

    /* Faults: exactly the Nth call from now fails, once. */
    EXPECT(hipsimSetFaults("hipGetDevice:2,hipStreamCreate:1:2") == 0);
    CHECK(hipGetDevice(&d));
    EXPECT_ERR(hipGetDevice(&d), hipErrorUnknown);
    CHECK(hipGetDevice(&d));
    EXPECT_ERR(hipStreamCreate(&s), hipErrorOutOfMemory);
    CHECK(hipStreamCreate(&s));
    CHECK(hipStreamDestroy(s));
    EXPECT(hipsimSetFaults("hipGetDevice") == -1);
    EXPECT(hipsimSetFaults("hipGetDevice:x") == -1);
    EXPECT(hipsimSetFaults("hipGetDevice:0") == -1);
    EXPECT(hipsimSetFaults("hipGetDevice:1") == 0);
    EXPECT(hipsimSetFaults("") == 0); /* clears */
    CHECK(hipGetDevice(&d));

    /* Quirks. */
    check_quirks(0);
    EXPECT(hipsimSetQuirks("clr138") == 0);
    check_quirks(1);
    EXPECT(hipsimSetQuirks("nonsense") == -1);
    EXPECT(hipsimSetQuirks("") == 0);
    check_quirks(0);
    check_kernarg();
    check_chain_staging(1); /* 7.2.4, unless HIPSIM_VERSION says otherwise */

    /* Latency. */
    EXPECT(hipsimSetLatency("hipGetDevice:30ms") == 0);
    EXPECT(time_get_device() >= 29.0);
    EXPECT(hipsimSetLatency("hipGetDevice:2000us") == 0);
    double t = time_get_device();
    EXPECT(t >= 1.9 && t < 25.0);
    EXPECT(hipsimSetLatency("hipGetDevice:3parsecs") == -1);
    EXPECT(hipsimSetLatency("") == 0);
    EXPECT(time_get_device() < 1.5);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "api";
    int n = -1;
    void *p;
    if (!strcmp(mode, "api")) {
        api();
    } else if (!strcmp(mode, "env-fail")) { /* HIPSIM_FAIL=hipMalloc:3,hipStreamCreate:2:801 */
        for (int i = 1; i <= 4; i++) {
            hipError_t e = hipMalloc(&p, 8);
            EXPECT((int)e == (i == 3 ? hipErrorUnknown : hipSuccess));
            if (e == hipSuccess) CHECK(hipFree(p));
        }
        hipStream_t s;
        CHECK(hipStreamCreate(&s));
        EXPECT_ERR(hipStreamCreate(&s), hipErrorNotSupported);
    } else if (!strcmp(mode, "env-quirks")) { /* HIPSIM_QUIRKS=clr138 */
        check_quirks(1);
        EXPECT(hipsimSetQuirks("") == 0);
        check_quirks(0);
    } else if (!strcmp(mode, "env-kernarg")) { /* HIPSIM_QUIRKS=kernarg_leak HIPSIM_KERNARG_POOL=1000 */
        hipModule_t m = load_module();
        hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
        void *d;
        CHECK(hipMalloc(&d, 64));
        hipGraph_t g;
        CHECK(hipGraphCreate(&g, 0));
        hipGraphNode_t k = kernel_node(g, fill, 1, d);
        hipGraphExec_t e;
        CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0)); /* 288 */
        CHECK(set_fill(e, k, fill, d, 1));                /* 576 */
        CHECK(set_fill(e, k, fill, d, 2));                /* 864 */
        EXPECT_ERR(set_fill(e, k, fill, d, 3), hipErrorOutOfMemory);
        EXPECT(hipsimLiveCount("kernarg") == 864);
    } else if (!strcmp(mode, "chain-staging-6.3")) { /* HIPSIM_VERSION=60300000 */
        check_chain_staging(0);
    } else if (!strcmp(mode, "env-latency")) { /* HIPSIM_LATENCY=hipStreamCreate:40ms,hipGetDevice:1500us */
        hipStream_t s;
        double t0 = now_ms();
        CHECK(hipStreamCreate(&s));
        EXPECT(now_ms() - t0 >= 39.0);
        EXPECT(time_get_device() >= 1.4);
        CHECK(hipStreamDestroy(s));
    } else if (!strcmp(mode, "no-devices")) { /* HIPSIM_DEVICES=0 */
        EXPECT_ERR(hipGetDeviceCount(&n), hipErrorNoDevice);
        EXPECT(n == 0);
        EXPECT_ERR(hipSetDevice(0), hipErrorNoDevice);
        EXPECT_ERR(hipMalloc(&p, 8), hipErrorNoDevice);
        hipStream_t s;
        EXPECT_ERR(hipStreamCreate(&s), hipErrorNoDevice);
    } else if (!strcmp(mode, "one-device")) { /* HIPSIM_DEVICES=1 */
        CHECK(hipGetDeviceCount(&n));
        EXPECT(n == 1);
        EXPECT_ERR(hipSetDevice(1), hipErrorInvalidDevice);
    } else if (!strcmp(mode, "stats")) { /* HIPSIM_STATS=1: the runner checks stderr */
        CHECK(hipMalloc(&p, 8));
        CHECK(hipFree(p));
        CHECK(hipMalloc(&p, 8));
        CHECK(hipFree(p));
        /* One fault fires, one is replaced before its call: "faults fired: 1". */
        EXPECT(hipsimSetFaults("hipGetDevice:1") == 0);
        int d;
        EXPECT_ERR(hipGetDevice(&d), hipErrorUnknown);
        EXPECT(hipsimSetFaults("hipGetDevice:5") == 0);
        EXPECT(hipsimSetFaults("") == 0);
    } else {
        fprintf(stderr, "unknown scenario %s\n", mode);
        return 2;
    }
    PASS();
}
