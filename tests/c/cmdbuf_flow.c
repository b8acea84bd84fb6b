/* End-to-end flow of the command-buffer, flattening and trace-cache exports from C, the way XLA
 * calls them: the program owns the HIP objects (module, stream, buffers, captured graphs) and
 * hands them to librocm_cmdbuf, and the results are checked in device memory and in the software
 * GPU's call counters. Compiled as C11 (this file) and as C++17 (cmdbuf_flow.cpp includes it).
 *
 * Build: against include/rocm_cmdbuf.h and Debian's HIP headers (-D__HIP_PLATFORM_AMD__), linked
 * with -lrocm_cmdbuf and with hipsim's libamdhip64.so (SONAME libamdhip64.so.6); see run.sh.
 * Usage: RCB_BACKEND=hip cmdbuf_flow MODE, where MODE says how the library finds hipsim:
 *   override   RCB_HIP_LIBRARY=<the hipsim file the program loaded>: the library dlopens that
 *              path, the same file, so the loader hands back the loaded instance
 *   preloaded  RCB_HIP_LIBRARY unset: the library finds the libamdhip64.so.6 already in the
 *              process (RTLD_NOLOAD)
 * Either way the program and the library must share ONE hipsim instance (checked first).
 * Scenarios: command buffer, flattened capture, flattening fallback, trace cache, error paths,
 * XLA's records (scanned arguments, a kernelParams node).
 * Exits 0 when every check holds, 1 otherwise (each failed check prints file:line and the
 * condition); a failing HIP call or a setup call that must succeed stops the program. */
#include "sim.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A moved allocation: a new buffer holding what the old one holds now. */
static void *moved_copy(void *old) {
    void *p;
    HIP(hipMalloc(&p, BYTES));
    HIP(hipMemcpy(p, old, BYTES, hipMemcpyDeviceToDevice));
    return p;
}

/* hipModuleLaunchKernel with one `kernelParams` pointer per argument. */
static hipError_t launch_axpy_kernel_params(axpy_packed *a, hipStream_t s) {
    void *params[] = {&a->y, &a->x, &a->a, &a->n};
    return hipModuleLaunchKernel(gpu.axpy, 1, 1, 1, N, 1, 1, 0, s, params, NULL);
}

/* The allocation table of `bufs`, each BYTES long. */
static void table_of(void *const *bufs, size_t n, rcb_allocation *table) {
    for (size_t i = 0; i < n; i++) {
        table[i].base = dptr(bufs[i]);
        table[i].size = BYTES;
    }
}

static size_t node_count(rcb_cmdbuf *cb) {
    size_t n = 0;
    RCB(rcb_cmdbuf_node_count(cb, &n));
    return n;
}

static size_t site_count(rcb_cmdbuf *cb) {
    size_t n = 0;
    RCB(rcb_cmdbuf_site_count(cb, &n));
    return n;
}

static rcb_flatten_report flatten_graph(rcb_cmdbuf *cb, hipGraph_t g, rcb_node *group) {
    rcb_flatten_report report;
    memset(&report, 0xAB, sizeof report);
    report.struct_size = sizeof report;
    RCB(rcb_cmdbuf_add_flattened_child(cb, NULL, 0, NULL, g, group, &report));
    return report;
}

static void free_all(void **bufs, size_t n) {
    for (size_t i = 0; i < n; i++) HIP(hipFree(bufs[i]));
}

/* The library must drive the program's hipsim, not a second copy: its graphs show up in this
 * program's live count and its calls in this program's counters. */
static void shared_instance(int preloaded) {
    rcb_runtime_info info;
    SIZED(info);
    RCB(rcb_runtime_load(&info));
    const char *path = getenv("RCB_HIP_LIBRARY");
    if (preloaded) {
        CHECK(path == NULL && strcmp(info.library, "libamdhip64.so.6 (already loaded)") == 0, "library '%s'",
              info.library);
    } else {
        CHECK(path != NULL && strcmp(info.library, path) == 0, "library '%s', RCB_HIP_LIBRARY '%s'", info.library,
              path ? path : "(unset)");
    }
    /* The process's first command buffer also settles the update budget, measuring the
     * runtime's growth with a probe graph of its own (destroyed at once; its 128-byte buffer is
     * kept for the process): settled by
     * this one, the counts below see one command buffer's calls. The software GPU leaks nothing
     * here, so the budget is HIP's fixed 64 MiB (the memset probe cannot show kernel-node growth). */
    CHECK(info.update_budget_basis == RCB_UPDATE_BUDGET_UNSETTLED, "basis %d before any command buffer",
          info.update_budget_basis);
    uint64_t graphs = hipsimLiveCount("graph");
    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_free(cb));
    CHECK(hipsimLiveCount("graph") == graphs && hipsimGetCallCount("hipGraphExecMemsetNodeSetParams") > 0,
          "the probe left a graph, or made no update");
    SIZED(info);
    RCB(rcb_runtime_load(&info));
    CHECK(info.update_budget_basis == RCB_UPDATE_BUDGET_MEASURED && info.update_growth_bytes == 0 &&
              info.update_budget_bytes == 64u << 20,
          "update budget: basis %d, growth %llu, budget %llu", info.update_budget_basis,
          (unsigned long long)info.update_growth_bytes, (unsigned long long)info.update_budget_bytes);
    uint64_t creates = hipsimGetCallCount("hipGraphCreate");
    RCB(rcb_cmdbuf_new(0, &cb));
    CHECK(hipsimLiveCount("graph") == graphs + 1 && hipsimGetCallCount("hipGraphCreate") == creates + 1,
          "the library's graph is not in the program's hipsim: two instances are loaded");
    RCB(rcb_cmdbuf_free(cb));
    CHECK(hipsimLiveCount("graph") == graphs, "the command buffer's graph was not destroyed");
}

/* 1. Record fill(x = 2) -> axpy(y += 3x) -> memcpy(out <- y), and memset(z = 5) beside them;
 * launch; move x, y and out (z stays) and update in place; launch again; then move out and z
 * naming only them (rcb_cmdbuf_move_allocations); launch again. */
static void command_buffer(void) {
    void *x = upload_f32(0), *y = upload_f32(1), *out = upload_f32(0), *z = upload_f32(0);
    void *bufs[4] = {x, y, out, z};
    rcb_allocation table[4];
    table_of(bufs, 4, table);

    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_set_allocations(cb, table, 4));
    rcb_node fill = add_fill(cb, NULL, 0, x, f32_bits(2.0f));
    rcb_node axpy = add_axpy(cb, &fill, 1, y, x, 3.0f);
    rcb_node memset_z = 0, copy = 0;
    RCB(rcb_cmdbuf_add_memset(cb, NULL, 0, dptr(z), 5, 4, N, &memset_z));
    RCB(rcb_cmdbuf_add_memcpy_d2d(cb, &axpy, 1, dptr(out), dptr(y), BYTES, &copy));
    CHECK(node_count(cb) == 4, "%zu nodes", node_count(cb));
    /* fill: x; axpy: y, x; memset: z; memcpy: out, y. Values (2.0, 3.0, N) are never sites. */
    CHECK(site_count(cb) == 6, "%zu sites", site_count(cb));
    RCB(rcb_cmdbuf_finalize(cb));
    rcb_memory_use kept;
    SIZED(kept);
    RCB(rcb_cmdbuf_memory_use(cb, &kept));
    uint64_t parts = kept.argument_copies + kept.node_records + kept.node_lists + kept.site_lists +
                     kept.allocation_table + kept.update_scratch + kept.other;
    /* fill (pointer, u32, u64) packs to 24 bytes, axpy (two pointers, float, u64) to 32. */
    CHECK(kept.struct_size == sizeof kept && kept.argument_bytes == 24 + 32 && kept.total_bytes == parts &&
              kept.argument_copies == kept.argument_bytes,
          "memory use: struct_size %u, argument bytes %llu (want 56), total %llu, parts %llu",
          (unsigned)kept.struct_size, (unsigned long long)kept.argument_bytes,
          (unsigned long long)kept.total_bytes, (unsigned long long)parts);

    launch_and_wait(cb);
    CHECK(holds_f32(x, 2), "x%s", mismatch);
    CHECK(holds_f32(y, 7), "y = 1 + 3 * 2: y%s", mismatch);
    CHECK(holds_f32(out, 7), "out%s", mismatch);
    CHECK(holds_u32(z, 5), "z%s", mismatch);

    void *x2 = upload_f32(0), *y2 = moved_copy(y), *out2 = upload_f32(0);
    table[0].base = dptr(x2);
    table[1].base = dptr(y2);
    table[2].base = dptr(out2);
    HIP(hipMemset(x, 0, BYTES));
    HIP(hipMemset(z, 0, BYTES));
    rcb_update_report report;
    memset(&report, 0xAB, sizeof report);
    report.struct_size = sizeof report;
    RCB(rcb_cmdbuf_update_allocations(cb, table, 4, &report));
    CHECK(report.moved_allocations == 3 && report.patched_sites == 5 && report.updated_nodes == 3 &&
              report.needs_rerecord == 0,
          "moved %u, patched %llu, updated %llu, needs_rerecord %u (want 3, 5, 3, 0: the memset stays)",
          report.moved_allocations, (unsigned long long)report.patched_sites,
          (unsigned long long)report.updated_nodes, report.needs_rerecord);
    CHECK(site_count(cb) == 6, "%zu sites after the move", site_count(cb));

    launch_and_wait(cb);
    CHECK(holds_f32(x2, 2), "x2%s", mismatch);
    CHECK(holds_f32(y2, 13), "y2 = 7 + 3 * 2: y2%s", mismatch);
    CHECK(holds_f32(out2, 13), "out2%s", mismatch);
    CHECK(holds_u32(z, 5), "z did not move and is still set: z%s", mismatch);
    CHECK(holds_f32(x, 0), "old x written after the move: x%s", mismatch);
    CHECK(holds_f32(y, 7), "old y written after the move: y%s", mismatch);
    CHECK(holds_f32(out, 7), "old out written after the move: out%s", mismatch);

    /* Then name only what moved, as XLA knows it: out and z, out of order. */
    void *out3 = upload_f32(0), *z2 = upload_f32(0);
    rcb_allocation_move moves[2] = {{3, dptr(z2)}, {2, dptr(out3)}};
    memset(&report, 0xAB, sizeof report);
    report.struct_size = sizeof report;
    RCB(rcb_cmdbuf_move_allocations(cb, moves, 2, &report));
    CHECK(report.moved_allocations == 2 && report.patched_sites == 2 && report.updated_nodes == 2 &&
              report.needs_rerecord == 0,
          "moved %u, patched %llu, updated %llu, needs_rerecord %u (want 2, 2, 2, 0: memset and memcpy)",
          report.moved_allocations, (unsigned long long)report.patched_sites,
          (unsigned long long)report.updated_nodes, report.needs_rerecord);
    launch_and_wait(cb);
    CHECK(holds_f32(y2, 19), "y2 = 13 + 3 * 2: y2%s", mismatch);
    CHECK(holds_f32(out3, 19), "out3%s", mismatch);
    CHECK(holds_u32(z2, 5), "z2%s", mismatch);
    CHECK(holds_f32(out2, 13), "old out2 written after the second move: out2%s", mismatch);

    RCB(rcb_cmdbuf_free(cb));
    void *moved[5] = {x2, y2, out2, out3, z2};
    free_all(bufs, 4);
    free_all(moved, 5);
}

/* 2. Capture fill(x = 2) -> axpy(y += 0.5x) (both `extra` style) -> hipMemcpyAsync(d <- y) ->
 * hipMemsetD32Async(z = 9) on the program's stream, flatten the raw graph into a command buffer,
 * add e = d + x after the group; launch; move every allocation and update; launch again. */
static void flattened_capture(void) {
    void *x = upload_f32(0), *y = upload_f32(1), *d = upload_f32(0), *z = upload_f32(0), *e = upload_f32(0);
    void *bufs[5] = {x, y, d, z, e};
    rcb_allocation table[5];
    table_of(bufs, 5, table);

    HIP(hipStreamBeginCapture(gpu.stream, hipStreamCaptureModeThreadLocal));
    fill_packed fa = fill_of(x, f32_bits(2.0f));
    axpy_packed aa = axpy_of(y, x, 0.5f);
    HIP(launch_extra(gpu.fill, &fa, sizeof fa, gpu.stream));
    HIP(launch_extra(gpu.axpy, &aa, sizeof aa, gpu.stream));
    HIP(hipMemcpyAsync(d, y, BYTES, hipMemcpyDeviceToDevice, gpu.stream));
    HIP(hipMemsetD32Async(z, 9, N, gpu.stream));
    hipGraph_t g;
    HIP(hipStreamEndCapture(gpu.stream, &g));

    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_set_allocations(cb, table, 5));
    rcb_node group = 0;
    rcb_flatten_report r = flatten_graph(cb, g, &group);
    /* Sites found by scanning the packed words: fill x; axpy y, x; memcpy d, y; memset z. */
    CHECK(r.flattened == 1 && r.nodes == 4 && r.sites == 6 && r.reason[0] == '\0',
          "flattened %u, nodes %u, sites %u, reason '%.*s' (want 1, 4, 6, '')", r.flattened, r.nodes, r.sites,
          RCB_FLATTEN_REASON_LEN, r.reason);
    CHECK(node_count(cb) == 4, "a chain has one exit, no join node: %zu nodes", node_count(cb));
    add_add(cb, &group, 1, e, d, x);
    /* The graph is still the caller's; the command buffer does not need it any more. */
    HIP(hipGraphDestroy(g));
    RCB(rcb_cmdbuf_finalize(cb));

    launch_and_wait(cb);
    CHECK(holds_f32(y, 2), "y = 1 + 0.5 * 2: y%s", mismatch);
    CHECK(holds_f32(d, 2), "d%s", mismatch);
    CHECK(holds_u32(z, 9), "z%s", mismatch);
    CHECK(holds_f32(e, 4), "e = d + x, after the group: e%s", mismatch);

    void *moved[5] = {upload_f32(0), moved_copy(y), upload_f32(0), upload_f32(0), upload_f32(0)};
    table_of(moved, 5, table);
    rcb_update_report up;
    SIZED(up);
    RCB(rcb_cmdbuf_update_allocations(cb, table, 5, &up));
    CHECK(up.moved_allocations == 5 && up.patched_sites == 9 && up.updated_nodes == 5 && up.needs_rerecord == 0,
          "moved %u, patched %llu, updated %llu, needs_rerecord %u (want 5, 9, 5, 0)", up.moved_allocations,
          (unsigned long long)up.patched_sites, (unsigned long long)up.updated_nodes, up.needs_rerecord);

    launch_and_wait(cb);
    CHECK(holds_f32(moved[0], 2), "x2%s", mismatch);
    CHECK(holds_f32(moved[1], 3), "y2 = 2 + 0.5 * 2: y2%s", mismatch);
    CHECK(holds_f32(moved[2], 3), "d2%s", mismatch);
    CHECK(holds_u32(moved[3], 9), "z2%s", mismatch);
    CHECK(holds_f32(moved[4], 5), "e2%s", mismatch);
    CHECK(holds_f32(y, 2) && holds_f32(e, 4), "old buffers written after the move:%s", mismatch);

    RCB(rcb_cmdbuf_free(cb));
    free_all(bufs, 5);
    free_all(moved, 5);
}

/* Flattens `g` (fill(x = 3) -> ... -> y += x) into a new command buffer, which must fall back to
 * one child node with a reason containing `why`, adds e = y + x after the group, checks that it
 * ran after the whole child, and that moving an allocation is refused (needs_rerecord). */
static void expect_fallback(hipGraph_t g, void *x, void *y, void *e, const char *why) {
    void *bufs[3] = {x, y, e};
    rcb_allocation table[3];
    table_of(bufs, 3, table);
    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_set_allocations(cb, table, 3));
    rcb_node group = 0;
    rcb_flatten_report r = flatten_graph(cb, g, &group);
    CHECK(r.flattened == 0 && r.sites == 0 && r.nodes == 3, "flattened %u, nodes %u, sites %u (want 0, 3, 0)",
          r.flattened, r.nodes, r.sites);
    CHECK(memchr(r.reason, '\0', RCB_FLATTEN_REASON_LEN) != NULL && strstr(r.reason, why) != NULL,
          "reason '%.*s' lacks '%s'", RCB_FLATTEN_REASON_LEN, r.reason, why);
    CHECK(node_count(cb) == 1, "one cloned child node, got %zu nodes", node_count(cb));
    add_add(cb, &group, 1, e, y, x);
    /* The only edge is child -> add: nothing of the child is dropped or left unordered. */
    void *template_graph = NULL;
    RCB(rcb_cmdbuf_graph(cb, &template_graph));
    size_t edges = 0;
    HIP(hipGraphGetEdges((hipGraph_t)template_graph, NULL, NULL, &edges));
    CHECK(edges == 1, "%zu edges", edges);
    HIP(hipGraphDestroy(g));
    RCB(rcb_cmdbuf_finalize(cb));
    launch_and_wait(cb);
    CHECK(holds_f32(x, 3), "x%s", mismatch);
    CHECK(holds_f32(y, 4), "y = 1 + 3: y%s", mismatch);
    CHECK(holds_f32(e, 7), "e = y + x saw the child's results: e%s", mismatch);

    /* The clone's addresses are unknown: no allocation moves in place, not even e, which only the
     * parent's add writes; the refusal changes nothing. */
    void *e2 = upload_f32(0);
    rcb_allocation_move move_e = {2, dptr(e2)};
    rcb_update_report up;
    memset(&up, 0xAB, sizeof up);
    up.struct_size = sizeof up;
    RCB(rcb_cmdbuf_move_allocations(cb, &move_e, 1, &up));
    CHECK(up.moved_allocations == 0 && up.patched_sites == 0 && up.updated_nodes == 0 && up.needs_rerecord == 1,
          "moved %u, patched %llu, updated %llu, needs_rerecord %u (want 0, 0, 0, 1)", up.moved_allocations,
          (unsigned long long)up.patched_sites, (unsigned long long)up.updated_nodes, up.needs_rerecord);
    launch_and_wait(cb);
    CHECK(holds_f32(e, 10) && holds_f32(e2, 0), "e = 7 + 3 at the old address, e2 untouched:%s", mismatch);
    HIP(hipFree(e2));
    RCB(rcb_cmdbuf_free(cb));
}

/* 3. Children that cannot be flattened: a `kernelParams` launch (HIP has no parameter-layout
 * query) and a copy from the host (the library re-creates device-to-device copies only). */
static void flatten_fallback(void) {
    void *x = upload_f32(0), *y = upload_f32(1), *e = upload_f32(0);
    HIP(hipStreamBeginCapture(gpu.stream, hipStreamCaptureModeThreadLocal));
    fill_packed fa = fill_of(x, f32_bits(3.0f));
    axpy_packed aa = axpy_of(y, x, 1.0f);
    HIP(launch_extra(gpu.fill, &fa, sizeof fa, gpu.stream));
    HIP(hipMemsetD32Async(e, 0, N, gpu.stream));
    HIP(launch_axpy_kernel_params(&aa, gpu.stream));
    hipGraph_t g;
    HIP(hipStreamEndCapture(gpu.stream, &g));
    expect_fallback(g, x, y, e, "kernelParams");

    void *bufs[3] = {x, y, e};
    free_all(bufs, 3);
    x = upload_f32(0);
    y = upload_f32(1);
    e = upload_f32(0);
    float *host_word;
    HIP(hipHostMalloc((void **)&host_word, sizeof *host_word, 0));
    *host_word = 5.0f;
    void *scratch = upload_f32(0);
    HIP(hipStreamBeginCapture(gpu.stream, hipStreamCaptureModeThreadLocal));
    fa = fill_of(x, f32_bits(3.0f));
    aa = axpy_of(y, x, 1.0f);
    HIP(launch_extra(gpu.fill, &fa, sizeof fa, gpu.stream));
    HIP(hipMemcpyAsync(scratch, host_word, sizeof *host_word, hipMemcpyHostToDevice, gpu.stream));
    HIP(launch_extra(gpu.axpy, &aa, sizeof aa, gpu.stream));
    HIP(hipStreamEndCapture(gpu.stream, &g));
    expect_fallback(g, x, y, e, "memcpy");
    float copied;
    HIP(hipMemcpy(&copied, scratch, sizeof copied, hipMemcpyDeviceToHost));
    CHECK(copied == 5.0f, "the child's copy from the host ran: %g", (double)copied);
    HIP(hipHostFree(host_word));
    void *bufs2[4] = {x, y, e, scratch};
    free_all(bufs2, 4);
}

static void check_report(const rcb_update_report *r, uint32_t moved, uint64_t patched, uint64_t updated,
                         uint32_t needs_rerecord, const char *what) {
    CHECK(r->moved_allocations == moved && r->patched_sites == patched && r->updated_nodes == updated &&
              r->needs_rerecord == needs_rerecord,
          "%s: moved %u, patched %llu, updated %llu, needs_rerecord %u (want %u, %llu, %llu, %u)", what,
          r->moved_allocations, (unsigned long long)r->patched_sites, (unsigned long long)r->updated_nodes,
          r->needs_rerecord, moved, (unsigned long long)patched, (unsigned long long)updated, needs_rerecord);
}

/* 6. What XLA records: fill(x = 2) with its arguments as ONE RCB_ARG_SCAN struct (sizes known,
 * kinds not), then axpy(y += 3x) through kernelParams (only the argument addresses known);
 * launch; every move is refused while the kernelParams node exists; update_kernel_params
 * changes the result; a command buffer of scanned arguments alone moves in place. */
static void xla_records(void) {
    void *x = upload_f32(0), *y = upload_f32(1), *x2 = upload_f32(0);
    void *bufs[2] = {x, y};
    rcb_allocation table[2];
    table_of(bufs, 2, table);
    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_set_allocations(cb, table, 2));
    fill_packed fa = fill_of(x, f32_bits(2.0f));
    rcb_kernel_arg scan = {&fa, sizeof fa, RCB_ARG_SCAN};
    rcb_node fill = add_kernel(cb, NULL, 0, gpu.fill, &scan, 1);
    CHECK(site_count(cb) == 1, "the scanned struct's dst word is the one site: %zu sites", site_count(cb));
    axpy_packed aa = axpy_of(y, x, 3.0f);
    void *params[4] = {&aa.y, &aa.x, &aa.a, &aa.n};
    rcb_kernel_params_launch kp = {sizeof(rcb_kernel_params_launch), (void *)gpu.axpy, {1, 1, 1}, {N, 1, 1}, 0, params};
    rcb_node axpy = 0;
    RCB(rcb_cmdbuf_add_kernel_params(cb, &fill, 1, &kp, &axpy));
    memset(&aa, 0, sizeof aa); /* the runtime copied the values during the call */
    CHECK(site_count(cb) == 1, "a kernelParams node has no sites: %zu sites", site_count(cb));
    RCB(rcb_cmdbuf_finalize(cb));
    launch_and_wait(cb);
    CHECK(holds_f32(x, 2), "x%s", mismatch);
    CHECK(holds_f32(y, 7), "y = 1 + 3 * 2: y%s", mismatch);

    rcb_allocation_move move_x = {0, dptr(x2)};
    rcb_update_report up;
    memset(&up, 0xAB, sizeof up);
    up.struct_size = sizeof up;
    RCB(rcb_cmdbuf_move_allocations(cb, &move_x, 1, &up));
    check_report(&up, 0, 0, 0, 1, "a move beside a kernelParams node");

    RCB(rcb_cmdbuf_begin_update(cb));
    EXPECT_FAIL(rcb_cmdbuf_update_kernel_params(cb, fill, &kp), RCB_STATUS_INVALID_ARGUMENT, "add_kernel_params");
    aa = axpy_of(y, x, 5.0f);
    RCB(rcb_cmdbuf_update_kernel_params(cb, axpy, &kp));
    RCB(rcb_cmdbuf_finalize(cb));
    launch_and_wait(cb);
    CHECK(holds_f32(y, 17), "y = 7 + 5 * 2 after the update: y%s", mismatch);
    CHECK(holds_f32(x2, 0), "x2 was never written:%s", mismatch);
    RCB(rcb_cmdbuf_free(cb));

    /* Without the kernelParams node the scanned site moves in place. */
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_set_allocations(cb, table, 2));
    fa = fill_of(x, f32_bits(4.0f));
    add_kernel(cb, NULL, 0, gpu.fill, &scan, 1);
    RCB(rcb_cmdbuf_finalize(cb));
    RCB(rcb_cmdbuf_move_allocations(cb, &move_x, 1, &up));
    check_report(&up, 1, 1, 1, 0, "a scanned site");
    launch_and_wait(cb);
    CHECK(holds_f32(x2, 4), "the fill followed x to x2: x2%s", mismatch);
    CHECK(holds_f32(x, 2), "old x written after the move: x%s", mismatch);
    RCB(rcb_cmdbuf_free(cb));
    void *all[3] = {x, y, x2};
    free_all(all, 3);
}

/* What the trace function issues: fill(x = value) -> axpy(y += 2x), both `extra` style. */
typedef struct {
    void *x, *y;
    float value;
    int32_t fail_with; /* returned after the fill when non-zero */
    unsigned calls;
} trace_work;

static int32_t trace_fill_axpy(void *user_data, void *stream) {
    trace_work *w = (trace_work *)user_data;
    hipStream_t s = (hipStream_t)stream;
    w->calls++;
    fill_packed fa = fill_of(w->x, f32_bits(w->value));
    if (launch_extra(gpu.fill, &fa, sizeof fa, s) != hipSuccess) return -1;
    if (w->fail_with != 0) return w->fail_with;
    axpy_packed aa = axpy_of(w->y, w->x, 2.0f);
    return launch_extra(gpu.axpy, &aa, sizeof aa, s) == hipSuccess ? 0 : -1;
}

static void run_graph(hipGraph_t g) {
    hipGraphExec_t exec;
    HIP(hipGraphInstantiate(&exec, g, NULL, NULL, 0));
    HIP(hipGraphLaunch(exec, gpu.stream));
    sync_stream();
    HIP(hipGraphExecDestroy(exec));
}

/* One get_or_trace that must succeed; returns the graph, writes the outcome. */
static hipGraph_t get_or_trace(rcb_trace_cache *tc, const rcb_allocation *key, trace_work *w, uint32_t *outcome) {
    void *g = NULL;
    RCB(rcb_trace_cache_get_or_trace(tc, gpu.stream, key, 2, trace_fill_axpy, w, &g, outcome));
    return (hipGraph_t)g;
}

/* 4. TRACED, then HIT (same key), then RELOCATED (same shape, new bases), each graph launched
 * and checked; a failing trace function leaves the cache as it was. */
static void trace_cache(void) {
    void *x = upload_f32(0), *y = upload_f32(1);
    void *bufs[2] = {x, y};
    rcb_allocation key[2];
    table_of(bufs, 2, key);
    trace_work w;
    memset(&w, 0, sizeof w);
    w.x = x;
    w.y = y;
    w.value = 3.0f;
    uint64_t graphs = hipsimLiveCount("graph");

    rcb_trace_cache *tc;
    RCB(rcb_trace_cache_new(4, &tc));
    uint64_t captures = hipsimGetCallCount("hipStreamBeginCapture");
    uint32_t outcome = 99;
    hipGraph_t g1 = get_or_trace(tc, key, &w, &outcome);
    CHECK(outcome == RCB_TRACE_TRACED && w.calls == 1, "outcome %u, %u trace calls", outcome, w.calls);
    CHECK(hipsimGetCallCount("hipStreamBeginCapture") == captures + 1, "one capture");
    CHECK(holds_f32(y, 1), "captured, not executed: y%s", mismatch);
    run_graph(g1);
    CHECK(holds_f32(x, 3) && holds_f32(y, 7), "y = 1 + 2 * 3:%s", mismatch);

    captures = hipsimGetCallCount("hipStreamBeginCapture");
    hipGraph_t g2 = get_or_trace(tc, key, &w, &outcome);
    CHECK(outcome == RCB_TRACE_HIT && g2 == g1 && w.calls == 1, "outcome %u, same graph %d, %u trace calls", outcome,
          g2 == g1, w.calls);
    run_graph(g2);
    CHECK(holds_f32(y, 13), "the hit graph ran again: y%s", mismatch);

    void *x2 = upload_f32(0), *y2 = upload_f32(10);
    void *moved[2] = {x2, y2};
    rcb_allocation key2[2];
    table_of(moved, 2, key2);
    hipGraph_t g3 = get_or_trace(tc, key2, &w, &outcome);
    CHECK(outcome == RCB_TRACE_RELOCATED && w.calls == 1, "outcome %u, %u trace calls", outcome, w.calls);
    CHECK(hipsimGetCallCount("hipStreamBeginCapture") == captures, "a hit or a relocation captured");
    run_graph(g3);
    CHECK(holds_f32(x2, 3) && holds_f32(y2, 16), "y2 = 10 + 2 * 3:%s", mismatch);
    CHECK(holds_f32(y, 13), "old y written by the relocated graph: y%s", mismatch);

    /* Another shape must be traced; the trace function fails after issuing the fill. */
    rcb_allocation other_shape[2] = {key2[0], key2[1]};
    other_shape[1].size = BYTES - 4;
    uint64_t graphs_before = hipsimLiveCount("graph");
    w.fail_with = 42;
    void *g = (void *)&w;
    outcome = 99;
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(tc, gpu.stream, other_shape, 2, trace_fill_axpy, &w, &g, &outcome),
                RCB_STATUS_CALLBACK_FAILED, "42");
    CHECK(g == (void *)&w && outcome == 99, "outputs written on failure");
    CHECK(w.calls == 2, "%u trace calls", w.calls);
    CHECK(hipsimLiveCount("graph") == graphs_before, "the partial capture was not destroyed");
    hipStreamCaptureStatus status;
    HIP(hipStreamIsCapturing(gpu.stream, &status));
    CHECK(status == hipStreamCaptureStatusNone, "the stream is left capturing");
    w.fail_with = 0;
    captures = hipsimGetCallCount("hipStreamBeginCapture");
    hipGraph_t g4 = get_or_trace(tc, key2, &w, &outcome);
    CHECK(outcome == RCB_TRACE_HIT && g4 == g3 && w.calls == 2, "after the failure: outcome %u, same graph %d",
          outcome, g4 == g3);
    CHECK(hipsimGetCallCount("hipStreamBeginCapture") == captures, "the hit captured");
    get_or_trace(tc, other_shape, &w, &outcome);
    CHECK(outcome == RCB_TRACE_TRACED && w.calls == 3, "nothing was cached for the failed key: outcome %u", outcome);

    RCB(rcb_trace_cache_free(tc));
    CHECK(hipsimLiveCount("graph") == graphs, "the cache's graphs outlived it");
    free_all(bufs, 2);
    free_all(moved, 2);
}

/* 5. Error paths: NULL arguments named, forged and freed handles, exactly one flatten source,
 * calls the state does not allow; each leaves the object as it was. */
static void error_paths(void) {
    rcb_cmdbuf *forged_cb = (rcb_cmdbuf *)(uintptr_t)0x7777;
    rcb_trace_cache *forged_tc = (rcb_trace_cache *)(uintptr_t)0x7777;
    rcb_allocation table[1] = {{0x1000, 16}};
    rcb_update_report up;
    SIZED(up);
    rcb_flatten_report fr;
    SIZED(fr);
    rcb_node group = 0, node = 0;
    void *g = NULL;
    uint32_t outcome = 0;

    EXPECT_FAIL(rcb_cmdbuf_new(0, NULL), RCB_STATUS_NULL_ARGUMENT, "`out`");
    EXPECT_FAIL(rcb_trace_cache_new(4, NULL), RCB_STATUS_NULL_ARGUMENT, "`out`");
    EXPECT_FAIL(rcb_cmdbuf_finalize(NULL), RCB_STATUS_NULL_ARGUMENT, "`cb`");

    rcb_cmdbuf *cb, *child;
    RCB(rcb_cmdbuf_new(0, &cb));
    RCB(rcb_cmdbuf_new_nested(0, &child));
    RCB(rcb_cmdbuf_finalize(child));
    EXPECT_FAIL(rcb_cmdbuf_add_kernel(cb, NULL, 0, NULL, &node), RCB_STATUS_NULL_ARGUMENT, "`launch`");
    rcb_kernel_launch no_args = {sizeof(rcb_kernel_launch), (void *)gpu.fill, {1, 1, 1}, {1, 1, 1}, 0, NULL, 3};
    EXPECT_FAIL(rcb_cmdbuf_add_kernel(cb, NULL, 0, &no_args, &node), RCB_STATUS_NULL_ARGUMENT, "args");
    EXPECT_FAIL(rcb_cmdbuf_set_allocations(cb, NULL, 1), RCB_STATUS_NULL_ARGUMENT, "`allocs`");
    EXPECT_FAIL(rcb_cmdbuf_add_flattened_child(cb, NULL, 0, child, NULL, NULL, &fr), RCB_STATUS_NULL_ARGUMENT,
                "`group`");
    EXPECT_FAIL(rcb_cmdbuf_add_flattened_child(cb, NULL, 0, child, NULL, &group, NULL), RCB_STATUS_NULL_ARGUMENT,
                "`report`");
    EXPECT_FAIL(rcb_cmdbuf_add_flattened_child(cb, NULL, 0, NULL, NULL, &group, &fr), RCB_STATUS_NULL_ARGUMENT,
                "`child` and `graph` are both NULL");
    hipGraph_t raw;
    HIP(hipGraphCreate(&raw, 0));
    EXPECT_FAIL(rcb_cmdbuf_add_flattened_child(cb, NULL, 0, child, raw, &group, &fr), RCB_STATUS_INVALID_ARGUMENT,
                "both set");
    HIP(hipGraphDestroy(raw));
    CHECK(group == 0, "group written on failure");
    CHECK(node_count(cb) == 0, "a failed call added %zu nodes", node_count(cb));

    /* Before finalize: no update of the allocations, no launch. */
    RCB(rcb_cmdbuf_set_allocations(cb, table, 1));
    rcb_allocation_move bad_moves[2] = {{0, table[0].base}, {1, table[0].base}};
    EXPECT_FAIL(rcb_cmdbuf_update_allocations(cb, table, 1, &up), RCB_STATUS_INVALID_STATE, "recording");
    EXPECT_FAIL(rcb_cmdbuf_move_allocations(cb, bad_moves, 1, &up), RCB_STATUS_INVALID_STATE, "recording");
    EXPECT_FAIL(rcb_cmdbuf_launch(cb, gpu.stream), RCB_STATUS_INVALID_STATE, "recording");
    RCB(rcb_cmdbuf_finalize(cb));
    EXPECT_FAIL(rcb_cmdbuf_update_allocations(cb, table, 1, NULL), RCB_STATUS_NULL_ARGUMENT, "`report`");
    EXPECT_FAIL(rcb_cmdbuf_move_allocations(cb, bad_moves, 1, NULL), RCB_STATUS_NULL_ARGUMENT, "`report`");
    EXPECT_FAIL(rcb_cmdbuf_move_allocations(cb, NULL, 1, &up), RCB_STATUS_NULL_ARGUMENT, "`moves`");
    EXPECT_FAIL(rcb_cmdbuf_move_allocations(cb, bad_moves, 2, &up), RCB_STATUS_INVALID_ARGUMENT,
                "moves[1].index 1 is outside the table of 1 allocation(s)");
    EXPECT_FAIL(rcb_cmdbuf_add_flattened_child(cb, NULL, 0, child, NULL, &group, &fr), RCB_STATUS_INVALID_STATE,
                "finalized");

    rcb_trace_cache *tc;
    RCB(rcb_trace_cache_new(1, &tc));
    trace_work w;
    memset(&w, 0, sizeof w);
    EXPECT_FAIL(rcb_trace_cache_new(0, &tc), RCB_STATUS_INVALID_ARGUMENT, "capacity");
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(NULL, gpu.stream, table, 1, trace_fill_axpy, &w, &g, &outcome),
                RCB_STATUS_NULL_ARGUMENT, "`tc`");
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(tc, gpu.stream, table, 1, NULL, &w, &g, &outcome),
                RCB_STATUS_NULL_ARGUMENT, "`trace_fn`");
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(tc, gpu.stream, table, 1, trace_fill_axpy, &w, NULL, &outcome),
                RCB_STATUS_NULL_ARGUMENT, "`graph`");
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(tc, gpu.stream, table, 1, trace_fill_axpy, &w, &g, NULL),
                RCB_STATUS_NULL_ARGUMENT, "`outcome`");
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(tc, gpu.stream, NULL, 1, trace_fill_axpy, &w, &g, &outcome),
                RCB_STATUS_NULL_ARGUMENT, "`allocs`");
    CHECK(w.calls == 0 && g == NULL, "a refused call traced or wrote its output");

    /* Forged handles, and handles of the other type, are looked up, never dereferenced. */
    EXPECT_FAIL(rcb_cmdbuf_finalize(forged_cb), RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_cmdbuf_add_flattened_child(forged_cb, NULL, 0, child, NULL, &group, &fr),
                RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_cmdbuf_update_allocations(forged_cb, table, 1, &up), RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_cmdbuf_move_allocations(forged_cb, bad_moves, 1, &up), RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(forged_tc, gpu.stream, table, 1, trace_fill_axpy, &w, &g, &outcome),
                RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_trace_cache_free(forged_tc), RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_cmdbuf_free((rcb_cmdbuf *)tc), RCB_STATUS_INVALID_HANDLE, "rcb_cmdbuf");
    EXPECT_FAIL(rcb_trace_cache_free((rcb_trace_cache *)cb), RCB_STATUS_INVALID_HANDLE, "rcb_trace_cache");

    /* The live objects were not harmed by any of the above. */
    launch_and_wait(cb);

    CHECK(rcb_cmdbuf_free(NULL) == RCB_OK && rcb_trace_cache_free(NULL) == RCB_OK, "free(NULL) is a no-op");
    RCB(rcb_cmdbuf_free(cb));
    RCB(rcb_cmdbuf_free(child));
    RCB(rcb_trace_cache_free(tc));
    EXPECT_FAIL(rcb_cmdbuf_free(cb), RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_trace_cache_free(tc), RCB_STATUS_INVALID_HANDLE, "not live");
    EXPECT_FAIL(rcb_cmdbuf_launch(cb, gpu.stream), RCB_STATUS_INVALID_HANDLE, "not live");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "override") != 0 && strcmp(mode, "preloaded") != 0) {
        fprintf(stderr, "usage: %s override|preloaded\n", argv[0]);
        return 2;
    }
    live_objects before = live_now();
    gpu_open();

    shared_instance(strcmp(mode, "preloaded") == 0);
    command_buffer();
    flattened_capture();
    flatten_fallback();
    trace_cache();
    xla_records();
    error_paths();

    gpu_close();
    check_nothing_leaked(before);
    printf("cmdbuf_flow %s: %s\n", mode, failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
