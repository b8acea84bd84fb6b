/* The header's contracts where the runtime fails or the caller does something unusual, checked
 * from C on the software GPU with its fault injection (hipsimSetFaults):
 *   1. a command buffer holding child nodes (nested twice, and a raw graph) is flattened, runs
 *      and moves its allocations;
 *   2. a failed hipStreamEndCapture leaves the capture to a retry or says the stream is usable;
 *   3. reads during a capture are refused;
 *   4. a trace cache called from its own trace_fn refuses instead of deadlocking;
 *   5. every free that meets a failed destroy releases its handle and says what leaked.
 * Compiled as C11 (this file) and as C++17 (contracts.cpp includes it).
 *
 * Build: against include/rocm_cmdbuf.h and Debian's HIP headers (-D__HIP_PLATFORM_AMD__), linked
 * with -lrocm_cmdbuf and hipsim's libamdhip64.so; see run.sh.
 * Usage: RCB_BACKEND=hip RCB_HIP_LIBRARY=<the hipsim file the program loaded> contracts faults
 * (its one mode). Exits 0 when every check holds, 1 otherwise; a deadlock ends it with SIGALRM. */
#include "sim.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Fault injection must be accepted, or every check below would pass for the wrong reason. */
static void faults(const char *spec) {
    if (hipsimSetFaults(spec) != 0) {
        fprintf(stderr, "hipsimSetFaults(\"%s\") refused\n", spec);
        exit(1);
    }
}

static int capturing(void) {
    hipStreamCaptureStatus status;
    HIP(hipStreamIsCapturing(gpu.stream, &status));
    return status != hipStreamCaptureStatusNone;
}

/* fill(dst = value) launched on the stream with its arguments in `extra`. */
static hipError_t launch_fill(void *dst, uint32_t value, hipStream_t s) {
    fill_packed a = fill_of(dst, value);
    return launch_extra(gpu.fill, &a, sizeof a, s);
}

/* 1. child = [child node of middle = [child node of inner = fill(x = 3) -> axpy(y += x)] ->
 * memset(z = 5)] -> memcpy(d <- y), and a child node of a raw graph (fill(w = 7)); flattened
 * into a primary command buffer, run, then every allocation moved and run again. */
static void flatten_children_of_children(void) {
    void *x = upload_f32(0), *y = upload_f32(1), *d = upload_f32(0), *z = upload_u32(0), *w = upload_u32(0);
    rcb_cmdbuf *inner, *middle, *child, *parent;
    RCB(rcb_cmdbuf_new_nested(0, &inner));
    rcb_node f = add_fill(inner, NULL, 0, x, f32_bits(3.0f));
    add_axpy(inner, &f, 1, y, x, 1.0f);
    RCB(rcb_cmdbuf_finalize(inner));
    RCB(rcb_cmdbuf_new_nested(0, &middle));
    rcb_node c = 0, m = 0, set = 0, copy = 0, raw = 0;
    RCB(rcb_cmdbuf_add_child(middle, NULL, 0, inner, &c));
    RCB(rcb_cmdbuf_add_memset(middle, &c, 1, dptr(z), 5, 4, N, &set));
    RCB(rcb_cmdbuf_finalize(middle));
    hipGraph_t g;
    hipGraphNode_t gn;
    HIP(hipGraphCreate(&g, 0));
    fill_packed fa = fill_of(w, 7);
    size_t size = sizeof fa;
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &fa, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
    hipKernelNodeParams kp;
    memset((void *)&kp, 0, sizeof kp); /* the cast: C++ sees constructors in dim3 */
    kp.func = (void *)gpu.fill;
    kp.gridDim.x = kp.gridDim.y = kp.gridDim.z = 1;
    kp.blockDim.x = N;
    kp.blockDim.y = kp.blockDim.z = 1;
    kp.extra = extra;
    HIP(hipGraphAddKernelNode(&gn, g, NULL, 0, &kp));
    RCB(rcb_cmdbuf_new_nested(0, &child));
    RCB(rcb_cmdbuf_add_child(child, NULL, 0, middle, &m));
    RCB(rcb_cmdbuf_add_memcpy_d2d(child, &m, 1, dptr(d), dptr(y), BYTES, &copy));
    RCB(rcb_cmdbuf_add_child_graph(child, NULL, 0, g, &raw));
    RCB(rcb_cmdbuf_finalize(child));
    HIP(hipGraphDestroy(g));

    rcb_allocation table[5] = {{dptr(x), BYTES}, {dptr(y), BYTES}, {dptr(d), BYTES}, {dptr(z), BYTES}, {dptr(w), BYTES}};
    RCB(rcb_cmdbuf_new(0, &parent));
    RCB(rcb_cmdbuf_set_allocations(parent, table, 5));
    rcb_node group = 0;
    rcb_flatten_report r;
    memset(&r, 0xAB, sizeof r);
    r.struct_size = sizeof r;
    rcb_status s = rcb_cmdbuf_add_flattened_child(parent, NULL, 0, child, NULL, &group, &r);
    CHECK(s == RCB_OK, "flattening a command buffer holding child nodes: %s: %s", rcb_status_str(s), last_error());
    if (s == RCB_OK) {
        /* fill: x; axpy: y, x; memset: z; memcpy: d, y; fill: w. */
        CHECK(r.flattened == 1 && r.nodes == 5 && r.sites == 7, "flattened %u, nodes %u, sites %u (want 1, 5, 7): '%.*s'",
              r.flattened, r.nodes, r.sites, RCB_FLATTEN_REASON_LEN, r.reason);
        RCB(rcb_cmdbuf_finalize(parent));
        launch_and_wait(parent);
        CHECK(holds_f32(d, 4) && holds_u32(z, 5) && holds_u32(w, 7), "d = 1 + 3, z = 5, w = 7 after the launch");
        void *moved[5] = {upload_f32(0), upload_f32(10), upload_f32(0), upload_u32(0), upload_u32(0)};
        for (int i = 0; i < 5; i++) table[i].base = dptr(moved[i]);
        rcb_update_report up;
        SIZED(up);
        RCB(rcb_cmdbuf_update_allocations(parent, table, 5, &up));
        CHECK(up.moved_allocations == 5 && up.patched_sites == 7 && up.needs_rerecord == 0,
              "moved %u, patched %llu, needs_rerecord %u (want 5, 7, 0)", up.moved_allocations,
              (unsigned long long)up.patched_sites, up.needs_rerecord);
        launch_and_wait(parent);
        CHECK(holds_f32(moved[2], 13) && holds_u32(moved[3], 5) && holds_u32(moved[4], 7), "d2 = 10 + 3, z2 = 5, w2 = 7");
        CHECK(holds_f32(d, 4), "the old d was written after the move");
        for (int i = 0; i < 5; i++) HIP(hipFree(moved[i]));
    }
    /* Neither command buffer was harmed: the child can still be embedded. */
    rcb_cmdbuf *other;
    rcb_node n = 0;
    RCB(rcb_cmdbuf_new(0, &other));
    RCB(rcb_cmdbuf_add_child(other, NULL, 0, child, &n));
    RCB(rcb_cmdbuf_free(other));
    RCB(rcb_cmdbuf_free(parent));
    RCB(rcb_cmdbuf_free(child));
    RCB(rcb_cmdbuf_free(middle));
    RCB(rcb_cmdbuf_free(inner));
    void *bufs[5] = {x, y, d, z, w};
    for (int i = 0; i < 5; i++) HIP(hipFree(bufs[i]));
}

/* 2 and 3. A capture whose end fails is kept for a retry, and nothing is read meanwhile. */
static void failed_capture_end(void) {
    void *x = upload_u32(0);
    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_capture_begin(cb, gpu.stream));
    HIP(launch_fill(x, 9, gpu.stream));
    void *g = NULL, *exec = NULL;
    size_t count = 99;
    EXPECT_FAIL(rcb_cmdbuf_graph(cb, &g), RCB_STATUS_INVALID_STATE, "capturing");
    EXPECT_FAIL(rcb_cmdbuf_exec(cb, &exec), RCB_STATUS_INVALID_STATE, "capturing");
    EXPECT_FAIL(rcb_cmdbuf_node_count(cb, &count), RCB_STATUS_INVALID_STATE, "capturing");
    EXPECT_FAIL(rcb_cmdbuf_site_count(cb, &count), RCB_STATUS_INVALID_STATE, "capturing");
    CHECK(g == NULL && exec == NULL && count == 99, "a refused read wrote its output");
    /* The memory it keeps is there to read in any state: a captured graph's nodes are the
     * runtime's, so the command buffer holds none of its own yet. */
    rcb_memory_use kept;
    SIZED(kept);
    RCB(rcb_cmdbuf_memory_use(cb, &kept));
    CHECK(kept.total_bytes > 0 && kept.node_records == 0 && kept.argument_bytes == 0,
          "memory during a capture: total %llu, node records %llu, argument bytes %llu",
          (unsigned long long)kept.total_bytes, (unsigned long long)kept.node_records,
          (unsigned long long)kept.argument_bytes);

    faults("hipStreamEndCapture:1");
    EXPECT_FAIL(rcb_cmdbuf_capture_end(cb), RCB_STATUS_RUNTIME_ERROR, "the stream is still capturing");
    faults("");
    CHECK(capturing(), "the stream should still be capturing");
    RCB(rcb_cmdbuf_capture_end(cb));
    CHECK(!capturing(), "the retry did not end the capture");
    RCB(rcb_cmdbuf_finalize(cb));
    launch_and_wait(cb);
    CHECK(holds_u32(x, 9), "the retried capture lost its work");
    RCB(rcb_cmdbuf_free(cb));

    /* Freed instead of retried: the free ends the capture. */
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_capture_begin(cb, gpu.stream));
    faults("hipStreamEndCapture:1");
    EXPECT_FAIL(rcb_cmdbuf_capture_end(cb), RCB_STATUS_RUNTIME_ERROR, "still capturing");
    faults("");
    RCB(rcb_cmdbuf_free(cb));
    CHECK(!capturing(), "the free did not end the capture");
    HIP(hipStreamSynchronize(gpu.stream));
    HIP(hipFree(x));
}

/* 4. What the re-entrant trace function does: the same cache from inside, then the work. */
typedef struct {
    rcb_trace_cache *tc;
    void *x;
    rcb_status inner_get, inner_free;
    char inner_message[256];
} reentrant;

static int32_t trace_reentrant(void *user_data, void *stream) {
    reentrant *r = (reentrant *)user_data;
    rcb_allocation other_key[1] = {{dptr(r->x), BYTES - 4}};
    void *g = NULL;
    uint32_t outcome = 0;
    r->inner_get = rcb_trace_cache_get_or_trace(r->tc, gpu.stream, other_key, 1, trace_reentrant, r, &g, &outcome);
    snprintf(r->inner_message, sizeof r->inner_message, "%s", last_error());
    r->inner_free = rcb_trace_cache_free(r->tc);
    return launch_fill(r->x, 6, (hipStream_t)stream) == hipSuccess ? 0 : -1;
}

static int32_t trace_fill(void *user_data, void *stream) {
    return launch_fill(user_data, 2, (hipStream_t)stream) == hipSuccess ? 0 : -1;
}

static void trace_cache_contracts(void) {
    void *x = upload_u32(0);
    rcb_allocation key[1] = {{dptr(x), BYTES}};
    rcb_trace_cache *tc;
    RCB(rcb_trace_cache_new(2, &tc));
    reentrant r;
    memset(&r, 0, sizeof r);
    r.tc = tc;
    r.x = x;
    r.inner_get = r.inner_free = -1;
    void *g = NULL;
    uint32_t outcome = 99;
    alarm(60); /* a deadlock ends the program */
    RCB(rcb_trace_cache_get_or_trace(tc, gpu.stream, key, 1, trace_reentrant, &r, &g, &outcome));
    alarm(0);
    CHECK(r.inner_get == RCB_STATUS_INVALID_STATE && strstr(r.inner_message, "own trace_fn") != NULL,
          "get_or_trace from its own trace_fn returned %s: '%s'", rcb_status_str(r.inner_get), r.inner_message);
    CHECK(r.inner_free == RCB_STATUS_INVALID_STATE, "free from its own trace_fn returned %s", rcb_status_str(r.inner_free));
    CHECK(outcome == RCB_TRACE_TRACED, "outcome %u", outcome);

    /* A failed end of capture: the library ends it on a second try and says the stream is usable. */
    rcb_allocation other_key[1] = {{dptr(x), BYTES - 8}};
    faults("hipStreamEndCapture:1");
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(tc, gpu.stream, other_key, 1, trace_fill, x, &g, &outcome),
                RCB_STATUS_RUNTIME_ERROR, "the stream is usable");
    faults("");
    CHECK(!capturing(), "the trace cache left the stream capturing");
    HIP(hipStreamSynchronize(gpu.stream));
    RCB(rcb_trace_cache_get_or_trace(tc, gpu.stream, other_key, 1, trace_fill, x, &g, &outcome));
    CHECK(outcome == RCB_TRACE_TRACED, "outcome %u after the failed end", outcome);

    /* 5. A free whose graph destroy fails: released, the leak reported. */
    uint64_t graphs = hipsimLiveCount("graph");
    faults("hipGraphDestroy:1");
    EXPECT_FAIL(rcb_trace_cache_free(tc), RCB_STATUS_RUNTIME_ERROR, "hipGraphDestroy");
    faults("");
    EXPECT_FAIL(rcb_trace_cache_free(tc), RCB_STATUS_INVALID_HANDLE, "not live");
    /* Two entries of three graphs each (the flattened one, the capture, and the capture's clone
     * that the flattened nodes keep for its user objects): the first destroy failed. */
    CHECK(hipsimLiveCount("graph") == graphs - 5, "the other graphs were not destroyed (%llu -> %llu)",
          (unsigned long long)graphs, (unsigned long long)hipsimLiveCount("graph"));
    HIP(hipFree(x));
}

/* 5. Frees of a command buffer and a pool whose destroys fail. */
static void failed_frees(void) {
    void *x = upload_u32(0);
    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    add_fill(cb, NULL, 0, x, 1);
    RCB(rcb_cmdbuf_finalize(cb));
    uint64_t graphs = hipsimLiveCount("graph");
    faults("hipGraphExecDestroy:1");
    EXPECT_FAIL(rcb_cmdbuf_free(cb), RCB_STATUS_RUNTIME_ERROR, "hipGraphExecDestroy");
    faults("");
    EXPECT_FAIL(rcb_cmdbuf_free(cb), RCB_STATUS_INVALID_HANDLE, "not live");
    CHECK(hipsimLiveCount("graph") == graphs - 1, "the graph was not destroyed after the failed exec destroy");

    /* A capture the free cannot end: released, and the stream's state said. */
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_capture_begin(cb, gpu.stream));
    faults("hipStreamEndCapture:1");
    EXPECT_FAIL(rcb_cmdbuf_free(cb), RCB_STATUS_RUNTIME_ERROR, "the stream is still capturing");
    faults("");
    EXPECT_FAIL(rcb_cmdbuf_free(cb), RCB_STATUS_INVALID_HANDLE, "not live");
    CHECK(capturing(), "the message says the stream is still capturing");
    hipGraph_t g;
    HIP(hipStreamEndCapture(gpu.stream, &g));
    HIP(hipGraphDestroy(g));

    uint64_t sizes[2] = {BYTES, BYTES};
    rcb_vmm_pool_config config;
    memset(&config, 0, sizeof config);
    config.struct_size = sizeof config;
    config.device = 0;
    config.backing = RCB_VMM_BACKING_VMM;
    config.num_slots = 2;
    config.num_buffers = 2;
    config.buffer_sizes = sizes;
    config.timeout_ms = 1000;
    rcb_vmm_pool *pool;
    RCB(rcb_vmm_pool_new(&config, &pool));
    faults("hipMemUnmap:1");
    EXPECT_FAIL(rcb_vmm_pool_free(pool), RCB_STATUS_RUNTIME_ERROR, "hipMemUnmap");
    faults("");
    EXPECT_FAIL(rcb_vmm_pool_free(pool), RCB_STATUS_INVALID_HANDLE, "not live");
    HIP(hipFree(x));
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "faults") != 0) {
        fprintf(stderr, "usage: %s faults\n", argv[0]);
        return 2;
    }
    gpu_open();

    flatten_children_of_children();
    failed_capture_end();
    trace_cache_contracts();
    failed_frees();

    gpu_close();
    printf("contracts: %s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
