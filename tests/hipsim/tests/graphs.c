/* Graph templates, executable graphs, exec setters, updates, child graphs, and a
 * 1,000-kernel random DAG checked against the same launches issued one by one. */
#include "check.h"

enum { N = 256 };

static hipFunction_t kfill, kaxpy, kadd, kcopy;
static int host_calls;
static void host_fn(void *p) { host_calls += *(int *)p; }

static hipKernelNodeParams kp_params(hipFunction_t f, void **params) {
    hipKernelNodeParams p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDim = (dim3){1, 1, 1};
    p.blockDim = (dim3){64, 1, 1};
    p.kernelParams = params;
    return p;
}

static void read_back(void *dst, const void *src, size_t n) { CHECK(hipMemcpy(dst, src, n, hipMemcpyDeviceToHost)); }

/* ---- random DAG ---- */
enum { NODES = 1000, BUFS = 4 };
typedef struct { int kind; int a, b, c; uint32_t bits; float alpha; } op_t;
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng % n); }

static void op_args(const op_t *o, float **bufs, void ***params_out, void **storage) {
    /* storage: 4 slots of 8 bytes each that the params point to */
    static void *params[4];
    uint64_t n = N;
    switch (o->kind) {
    case 0: memcpy(storage[0], &bufs[o->a], 8); memcpy(storage[1], &o->bits, 4); memcpy(storage[2], &n, 8); break;
    case 1: memcpy(storage[0], &bufs[o->a], 8); memcpy(storage[1], &bufs[o->b], 8); memcpy(storage[2], &o->alpha, 4); memcpy(storage[3], &n, 8); break;
    case 2: memcpy(storage[0], &bufs[o->a], 8); memcpy(storage[1], &bufs[o->b], 8); memcpy(storage[2], &bufs[o->c], 8); memcpy(storage[3], &n, 8); break;
    default: { uint64_t bytes = N * 4; memcpy(storage[0], &bufs[o->a], 8); memcpy(storage[1], &bufs[o->b], 8); memcpy(storage[2], &bytes, 8); }
    }
    for (int i = 0; i < 4; i++) params[i] = storage[i];
    *params_out = params;
}

static hipFunction_t op_fn(const op_t *o) { hipFunction_t t[] = {kfill, kaxpy, kadd, kcopy}; return t[o->kind]; }

static void reset_bufs(float **bufs) {
    for (int b = 0; b < BUFS; b++) CHECK(hipMemsetD32(bufs[b], 0x3f800000 + b, N)); /* 1.0f + tiny */
}

static void random_dag(void) {
    float *bufs[BUFS];
    for (int b = 0; b < BUFS; b++) CHECK(hipMalloc((void **)&bufs[b], N * 4));
    static op_t ops[NODES];
    static hipGraphNode_t nodes[NODES];
    int last_touch[BUFS];
    for (int b = 0; b < BUFS; b++) last_touch[b] = -1;
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    uint64_t s0, s1, s2, s3;
    void *storage[4] = {&s0, &s1, &s2, &s3};
    for (int i = 0; i < NODES; i++) {
        op_t *o = &ops[i];
        o->kind = (int)rnd(4);
        o->a = (int)rnd(BUFS); o->b = (int)rnd(BUFS); o->c = (int)rnd(BUFS);
        if (o->kind == 3 && o->b == o->a) o->b = (o->a + 1) % BUFS;
        o->bits = 0x3f000000u + rnd(0x800000);
        o->alpha = (float)((int)rnd(5) - 2) * 0.25f;
        /* Conflicting accesses are always ordered, so every topological order computes the
         * same result; extra random edges make the DAG irregular. */
        hipGraphNode_t deps[BUFS + 2];
        size_t nd = 0;
        int touched[3] = {o->a, o->kind >= 1 ? o->b : -1, o->kind == 2 ? o->c : -1};
        for (int t = 0; t < 3; t++) {
            if (touched[t] < 0 || last_touch[touched[t]] < 0) continue;
            hipGraphNode_t d = nodes[last_touch[touched[t]]];
            int dup = 0;
            for (size_t k = 0; k < nd; k++) dup |= deps[k] == d;
            if (!dup) deps[nd++] = d;
        }
        if (i > 0 && rnd(3) == 0) {
            hipGraphNode_t d = nodes[rnd((uint32_t)i)];
            int dup = 0;
            for (size_t k = 0; k < nd; k++) dup |= deps[k] == d;
            if (!dup) deps[nd++] = d;
        }
        void **params;
        op_args(o, bufs, &params, storage);
        hipKernelNodeParams p = kp_params(op_fn(o), params);
        CHECK(hipGraphAddKernelNode(&nodes[i], g, deps, nd, &p));
        for (int t = 0; t < 3; t++) if (touched[t] >= 0) last_touch[touched[t]] = i;
    }
    size_t count = 0;
    CHECK(hipGraphGetNodes(g, NULL, &count));
    EXPECT(count == NODES);
    hipGraphExec_t ex;
    CHECK(hipGraphInstantiate(&ex, g, NULL, NULL, 0));
    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    reset_bufs(bufs);
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    static float from_graph[BUFS][N], from_stream[BUFS][N];
    for (int b = 0; b < BUFS; b++) read_back(from_graph[b], bufs[b], N * 4);
    reset_bufs(bufs);
    for (int i = 0; i < NODES; i++) {
        void **params;
        op_args(&ops[i], bufs, &params, storage);
        CHECK(hipModuleLaunchKernel(op_fn(&ops[i]), 1, 1, 1, 64, 1, 1, 0, s, params, NULL));
    }
    CHECK(hipStreamSynchronize(s));
    for (int b = 0; b < BUFS; b++) read_back(from_stream[b], bufs[b], N * 4);
    EXPECT(memcmp(from_graph, from_stream, sizeof from_graph) == 0);
    CHECK(hipGraphExecDestroy(ex));
    CHECK(hipGraphDestroy(g));
    CHECK(hipStreamDestroy(s));
    for (int b = 0; b < BUFS; b++) CHECK(hipFree(bufs[b]));
}

int main(void) {
    uint64_t live_graphs = hipsimLiveCount("graph"), live_execs = hipsimLiveCount("exec");
    hipModule_t m = load_module();
    kfill = get_fn(m, "rcb_test_fill_u32"); kaxpy = get_fn(m, "rcb_test_axpy_f32");
    kadd = get_fn(m, "rcb_test_add_f32"); kcopy = get_fn(m, "rcb_test_copy_u8");
    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    uint32_t *a, *b, *c;
    CHECK(hipMalloc((void **)&a, N * 4)); CHECK(hipMalloc((void **)&b, N * 4)); CHECK(hipMalloc((void **)&c, N * 4));
    uint32_t host[N];

    /* memset -> kernel(kernelParams) -> kernel(extra) -> memcpy; empty joins; host node; child. */
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    hipMemsetParams ms = {0};
    ms.dst = a; ms.elementSize = 4; ms.width = N; ms.height = 1; ms.value = 0x11;
    hipGraphNode_t nset, nk1, nk2, ncpy, nempty, nhost, nchild;
    CHECK(hipGraphAddMemsetNode(&nset, g, NULL, 0, &ms));
    uint32_t v1 = 0x22; uint64_t n = N;
    void *p1[] = {&b, &v1, &n};
    hipKernelNodeParams kp1 = kp_params(kfill, p1);
    CHECK(hipGraphAddKernelNode(&nk1, g, &nset, 1, &kp1));
    v1 = 0x99; /* values were copied at add time */
    fill_args_t fa = {c, 0x33, 0, N};
    size_t fsize = 24;
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &fa, HIP_LAUNCH_PARAM_BUFFER_SIZE, &fsize, HIP_LAUNCH_PARAM_END};
    hipKernelNodeParams kp2 = kp_params(kfill, NULL);
    kp2.extra = extra;
    CHECK(hipGraphAddKernelNode(&nk2, g, &nset, 1, &kp2));
    fa.value = 0x98;
    hipGraphNode_t two[] = {nk1, nk2};
    CHECK(hipGraphAddEmptyNode(&nempty, g, two, 2));
    CHECK(hipGraphAddMemcpyNode1D(&ncpy, g, &nempty, 1, a, b, 16, hipMemcpyDeviceToDevice));
    int incr = 5;
    hipHostNodeParams hp = {host_fn, &incr};
    CHECK(hipGraphAddHostNode(&nhost, g, &ncpy, 1, &hp));
    hipGraph_t child;
    CHECK(hipGraphCreate(&child, 0));
    hipGraphNode_t cn;
    ms.dst = c; ms.value = 0x44; ms.width = 4;
    CHECK(hipGraphAddMemsetNode(&cn, child, NULL, 0, &ms));
    CHECK(hipGraphAddChildGraphNode(&nchild, g, &nhost, 1, child));
    ms.value = 0x55;
    hipGraphNode_t cn2;
    CHECK(hipGraphAddMemsetNode(&cn2, child, &cn, 1, &ms)); /* the embedded clone is unaffected */
    hipGraph_t embedded;
    CHECK(hipGraphChildGraphNodeGetGraph(nchild, &embedded));
    EXPECT(embedded != child);
    size_t count = 0;
    CHECK(hipGraphGetNodes(embedded, NULL, &count));
    EXPECT(count == 1);

    /* Introspection. */
    hipGraphNodeType t;
    hipGraphNode_t all[7] = {nset, nk1, nk2, nempty, ncpy, nhost, nchild};
    int want_types[7] = {NODE_MEMSET, NODE_KERNEL, NODE_KERNEL, NODE_EMPTY, NODE_MEMCPY, NODE_HOST, NODE_GRAPH};
    for (int i = 0; i < 7; i++) { CHECK(hipGraphNodeGetType(all[i], &t)); EXPECT((int)t == want_types[i]); }
    hipGraphNode_t list[10];
    count = 10;
    CHECK(hipGraphGetNodes(g, list, &count));
    EXPECT(count == 7 && memcmp(list, all, sizeof all) == 0);
    count = 10;
    CHECK(hipGraphGetRootNodes(g, list, &count));
    EXPECT(count == 1 && list[0] == nset);
    hipGraphNode_t from[10], to[10];
    count = 0;
    CHECK(hipGraphGetEdges(g, NULL, NULL, &count));
    EXPECT(count == 7);
    count = 10;
    CHECK(hipGraphGetEdges(g, from, to, &count));
    EXPECT(count == 7 && from[0] == nset && to[0] == nk1);
    count = 10;
    CHECK(hipGraphNodeGetDependencies(nempty, list, &count));
    EXPECT(count == 2 && list[0] == nk1 && list[1] == nk2);
    count = 10;
    CHECK(hipGraphNodeGetDependentNodes(nset, list, &count));
    EXPECT(count == 2 && list[0] == nk1 && list[1] == nk2);
    EXPECT_ERR(hipGraphAddDependencies(g, &nset, &nk1, 1), hipErrorInvalidValue); /* duplicate edge */
    EXPECT_ERR(hipGraphAddEmptyNode(&nempty, g, &cn, 1), hipErrorInvalidValue);    /* foreign dep */

    /* Kernel node params are node-owned copies, in the style they were added with. */
    hipKernelNodeParams got, got2;
    CHECK(hipGraphKernelNodeGetParams(nk1, &got));
    CHECK(hipGraphKernelNodeGetParams(nk1, &got2));
    EXPECT(got.kernelParams && !got.extra && got.kernelParams == got2.kernelParams);
    EXPECT(got.kernelParams != p1 && *(uint32_t *)got.kernelParams[1] == 0x22 && *(uint64_t *)got.kernelParams[2] == N);
    EXPECT(got.func == kfill && got.gridDim.x == 1 && got.blockDim.x == 64);
    CHECK(hipGraphKernelNodeGetParams(nk2, &got));
    EXPECT(!got.kernelParams && got.extra && got.extra != extra);
    EXPECT(got.extra[0] == HIP_LAUNCH_PARAM_BUFFER_POINTER && got.extra[2] == HIP_LAUNCH_PARAM_BUFFER_SIZE && got.extra[4] == HIP_LAUNCH_PARAM_END);
    EXPECT(*(size_t *)got.extra[3] == 24 && ((fill_args_t *)got.extra[1])->value == 0x33);
    hipMemcpy3DParms cp;
    CHECK(hipGraphMemcpyNodeGetParams(ncpy, &cp));
    EXPECT(cp.dstPtr.ptr == a && cp.srcPtr.ptr == b && cp.extent.width == 16 && cp.extent.height == 1 && cp.kind == hipMemcpyDeviceToDevice);
    hipMemsetParams msg;
    CHECK(hipGraphMemsetNodeGetParams(nset, &msg));
    EXPECT(msg.dst == a && msg.value == 0x11 && msg.elementSize == 4 && msg.width == N);
    EXPECT_ERR(hipGraphMemsetNodeGetParams(nk1, &msg), hipErrorInvalidValue);

    /* Instantiate and launch. */
    hipGraphExec_t ex;
    CHECK(hipGraphInstantiate(&ex, g, NULL, NULL, 0));
    EXPECT(hipsimLiveCount("exec") == live_execs + 1);
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    read_back(host, a, N * 4);
    expect_u32(host, 4, 0x22); expect_u32(host + 4, N - 4, 0x11);
    read_back(host, c, N * 4);
    expect_u32(host, 4, 0x44); expect_u32(host + 4, N - 4, 0x33);
    EXPECT(host_calls == 5);

    /* Exec setters change the executable only; the template keeps its params. */
    fill_args_t fb = {c, 0x66, 0, N};
    void *extra2[] = {HIP_LAUNCH_PARAM_BUFFER_SIZE, &fsize, HIP_LAUNCH_PARAM_BUFFER_POINTER, &fb, HIP_LAUNCH_PARAM_END};
    hipKernelNodeParams kp3 = kp_params(kfill, NULL);
    kp3.extra = extra2;
    CHECK(hipGraphExecKernelNodeSetParams(ex, nk2, &kp3));
    ms.dst = a; ms.value = 0x77; ms.width = N;
    CHECK(hipGraphExecMemsetNodeSetParams(ex, nset, &ms));
    CHECK(hipGraphExecMemcpyNodeSetParams1D(ex, ncpy, a, b, 8, hipMemcpyDeviceToDevice));
    EXPECT_ERR(hipGraphExecMemsetNodeSetParams(ex, nk1, &ms), hipErrorInvalidValue);
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    read_back(host, c, N * 4);
    expect_u32(host + 4, N - 4, 0x66);
    read_back(host, a, N * 4);
    expect_u32(host, 2, 0x22); expect_u32(host + 2, N - 2, 0x77);
    CHECK(hipGraphKernelNodeGetParams(nk2, &got));
    EXPECT(((fill_args_t *)got.extra[1])->value == 0x33);
    CHECK(hipGraphMemsetNodeGetParams(nset, &msg));
    EXPECT(msg.value == 0x11);

    /* Template SetParams switches style and copies values. */
    uint32_t v2 = 0x88;
    void *p2[] = {&c, &v2, &n};
    hipKernelNodeParams kp4 = kp_params(kfill, p2);
    CHECK(hipGraphKernelNodeSetParams(nk2, &kp4));
    CHECK(hipGraphKernelNodeGetParams(nk2, &got));
    EXPECT(got.kernelParams && !got.extra && *(uint32_t *)got.kernelParams[1] == 0x88);

    /* Whole-graph update: same topology succeeds, changed topology fails and keeps the exec. */
    hipGraphNode_t err_node = (hipGraphNode_t)(uintptr_t)1;
    hipGraphExecUpdateResult res = (hipGraphExecUpdateResult)99;
    CHECK(hipGraphExecUpdate(ex, g, &err_node, &res));
    EXPECT(res == hipGraphExecUpdateSuccess && err_node == NULL);
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    read_back(host, c, N * 4);
    expect_u32(host + 4, N - 4, 0x88);
    expect_u32(host, 4, 0x44);
    hipGraphNode_t extra_node;
    CHECK(hipGraphAddEmptyNode(&extra_node, g, NULL, 0));
    EXPECT_ERR(hipGraphExecUpdate(ex, g, &err_node, &res), hipErrorGraphExecUpdateFailure);
    EXPECT(res == hipGraphExecUpdateErrorTopologyChanged);
    CHECK(hipMemsetD32(c, 0, N));
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    read_back(host, c, N * 4);
    expect_u32(host + 4, N - 4, 0x88);

    /* Exec child update; clone independence. */
    hipGraph_t child2;
    CHECK(hipGraphCreate(&child2, 0));
    ms.dst = c; ms.value = 0xAA; ms.width = 4;
    CHECK(hipGraphAddMemsetNode(&cn, child2, NULL, 0, &ms));
    CHECK(hipGraphExecChildGraphNodeSetParams(ex, nchild, child2));
    EXPECT_ERR(hipGraphExecChildGraphNodeSetParams(ex, nchild, child), hipErrorInvalidValue); /* 2 nodes */
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    read_back(host, c, 16);
    expect_u32(host, 4, 0xAA);
    hipGraph_t cl;
    CHECK(hipGraphClone(&cl, g));
    count = 0;
    CHECK(hipGraphGetNodes(cl, NULL, &count));
    EXPECT(count == 8);
    CHECK(hipGraphDestroy(cl));
    EXPECT_ERR(hipGraphDestroy(cl), hipErrorInvalidHandle);
    EXPECT_ERR(hipGraphNodeGetType(nk1, &t) == hipSuccess ? hipSuccess : hipErrorUnknown, hipSuccess);

    /* 2-D memset with a pitch; empty graphs; cycles. */
    hipGraph_t g2;
    CHECK(hipGraphCreate(&g2, 0));
    hipGraphExec_t ex2;
    CHECK(hipGraphInstantiate(&ex2, g2, NULL, NULL, 0));
    CHECK(hipGraphLaunch(ex2, s));
    CHECK(hipGraphExecDestroy(ex2));
    CHECK(hipMemsetD32(a, 0, N));
    hipMemsetParams m2 = {0};
    m2.dst = a; m2.elementSize = 2; m2.width = 3; m2.height = 4; m2.pitch = 16; m2.value = 0xBEEF;
    hipGraphNode_t n2d, nloop;
    CHECK(hipGraphAddMemsetNode(&n2d, g2, NULL, 0, &m2));
    CHECK(hipGraphInstantiateWithFlags(&ex2, g2, 0));
    CHECK(hipGraphLaunch(ex2, NULL));
    read_back(host, a, 64);
    for (int r = 0; r < 4; r++) {
        uint16_t *row = (uint16_t *)((char *)host + 16 * r);
        EXPECT(row[0] == 0xBEEF && row[2] == 0xBEEF && row[3] == 0);
    }
    CHECK(hipGraphAddEmptyNode(&nloop, g2, &n2d, 1));
    CHECK(hipGraphAddDependencies(g2, &nloop, &n2d, 1));
    hipGraphExec_t ex3;
    EXPECT_ERR(hipGraphInstantiate(&ex3, g2, NULL, NULL, 0), hipErrorInvalidValue);
    CHECK(hipGraphExecDestroy(ex2));
    CHECK(hipGraphDestroy(g2));

    random_dag();

    CHECK(hipGraphExecDestroy(ex));
    EXPECT_ERR(hipGraphLaunch(ex, s), hipErrorInvalidHandle);
    CHECK(hipGraphDestroy(g));
    EXPECT_ERR(hipGraphNodeGetType(nk1, &t), hipErrorInvalidHandle);
    CHECK(hipGraphDestroy(child)); CHECK(hipGraphDestroy(child2));
    EXPECT(hipsimLiveCount("graph") == live_graphs && hipsimLiveCount("exec") == live_execs);
    CHECK(hipFree(a)); CHECK(hipFree(b)); CHECK(hipFree(c));
    CHECK(hipStreamDestroy(s));
    CHECK(hipModuleUnload(m));
    PASS();
}
