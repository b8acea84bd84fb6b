/* A program of the previous ABI: built against tests/abi/old/rocm_cmdbuf.h (the header before
 * 0.1.0 gave its structs a struct_size) and linked as programs were then, against a library
 * without symbol versions (run.sh links it against a stand-in of that library); it runs against
 * the library of this checkout, on the software GPU. What such a program must get, and gets:
 *   - every function whose parameters did not change works as that header says: a command
 *     buffer of memset and memcpy nodes is recorded, launched and moved in place, its results
 *     checked in device memory; the counters (sized from the start) read back;
 *   - each of the 17 functions whose structs gained struct_size refuses the call with
 *     RCB_STATUS_UNSUPPORTED and a message naming it and saying to rebuild, and leaves the
 *     program's struct, and the bytes around it, as they were (the loader binds the program's
 *     unversioned references to the library's oldest version of each name, ROCM_CMDBUF_0.0);
 *   - dlsym of the same name gives the current version, the one a program built now links.
 * Exits 0 when every check holds. */
#include <hip/hip_runtime_api.h>

#include "rocm_cmdbuf.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            failures++;                                                               \
        }                                                                             \
    } while (0)

#define NEED(call)                                                                               \
    do {                                                                                         \
        int s_ = (int)(call);                                                                    \
        if (s_ != 0) {                                                                           \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, s_, message()); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static const char *message(void) {
    static char buf[1024];
    rcb_last_error_message(buf, sizeof buf);
    return buf;
}

enum { N = 64, BYTES = N * 4, GUARD = 64 };

/* A struct of the old header in the middle of a buffer of 0xA5 bytes. */
typedef struct {
    unsigned char bytes[GUARD + 512 + GUARD];
} guarded;

static void *guard(guarded *g) {
    memset(g->bytes, 0xA5, sizeof g->bytes);
    return g->bytes + GUARD;
}

static int untouched(const guarded *g) {
    for (size_t i = 0; i < sizeof g->bytes; i++) {
        if (g->bytes[i] != 0xA5) return 0;
    }
    return 1;
}

/* A call of a function whose structs gained their size: refused, naming it, nothing written. */
static void expect_refused(rcb_status s, const char *name, const guarded *g) {
    CHECK(s == RCB_STATUS_UNSUPPORTED, "%s returned %d (%s), want RCB_STATUS_UNSUPPORTED", name, (int)s, rcb_status_str(s));
    const char *m = message();
    CHECK(strncmp(m, name, strlen(name)) == 0 && strstr(m, "older than 0.1.0") != NULL && strstr(m, "rebuild") != NULL,
          "%s: message '%s'", name, m);
    CHECK(g == NULL || untouched(g), "%s wrote into or around the program's struct", name);
}

static int holds(const void *dev, uint32_t want) {
    uint32_t host[N];
    if (hipMemcpy(host, dev, BYTES, hipMemcpyDeviceToHost) != hipSuccess) return 0;
    for (int i = 0; i < N; i++) {
        if (host[i] != want) return 0;
    }
    return 1;
}

int main(void) {
    printf("a program built against the previous header, run with rocm_cmdbuf %s\n", rcb_version());
    hipStream_t stream;
    void *a, *b, *b2;
    NEED(hipStreamCreate(&stream));
    NEED(hipMalloc(&a, BYTES));
    NEED(hipMalloc(&b, BYTES));
    NEED(hipMalloc(&b2, BYTES));

    /* Unchanged functions: memset a, copy a to b; then b moves and only that is patched. */
    rcb_cmdbuf *cb = NULL;
    NEED(rcb_cmdbuf_new(0, &cb));
    rcb_allocation table[2] = {{(uint64_t)(uintptr_t)a, BYTES}, {(uint64_t)(uintptr_t)b, BYTES}};
    NEED(rcb_cmdbuf_set_allocations(cb, table, 2));
    rcb_node set = 0, copy = 0;
    NEED(rcb_cmdbuf_add_memset(cb, NULL, 0, (uint64_t)(uintptr_t)a, 7, 4, N, &set));
    NEED(rcb_cmdbuf_add_memcpy_d2d(cb, &set, 1, (uint64_t)(uintptr_t)b, (uint64_t)(uintptr_t)a, BYTES, &copy));
    NEED(rcb_cmdbuf_finalize(cb));
    NEED(rcb_cmdbuf_launch(cb, stream));
    NEED(hipStreamSynchronize(stream));
    CHECK(holds(b, 7), "the copy of the memset did not reach b");
    rcb_counters counters;
    memset(&counters, 0, sizeof counters);
    counters.struct_size = sizeof counters;
    NEED(rcb_counters_get(cb, &counters));
    CHECK(counters.version == RCB_COUNTERS_VERSION && counters.instantiations == 1,
          "counters: version %u, %llu instantiations", counters.version, (unsigned long long)counters.instantiations);

    /* The functions whose structs gained struct_size: each refused, nothing written. */
    guarded g;
    rcb_allocation moved[2] = {table[0], {(uint64_t)(uintptr_t)b2, BYTES}};
    expect_refused(rcb_cmdbuf_update_allocations(cb, moved, 2, guard(&g)), "rcb_cmdbuf_update_allocations", &g);
    rcb_allocation_move move = {1, (uint64_t)(uintptr_t)b2};
    expect_refused(rcb_cmdbuf_move_allocations(cb, &move, 1, guard(&g)), "rcb_cmdbuf_move_allocations", &g);
    NEED(rcb_cmdbuf_launch(cb, stream));
    NEED(hipStreamSynchronize(stream));
    CHECK(holds(b, 7) && !holds(b2, 7), "a refused move moved something");

    rcb_kernel_launch launch;
    memset(&launch, 0, sizeof launch);
    rcb_kernel_params_launch params;
    memset(&params, 0, sizeof params);
    rcb_node node = 0x5A5A;
    rcb_cmdbuf *rec = NULL;
    NEED(rcb_cmdbuf_new(0, &rec));
    expect_refused(rcb_cmdbuf_add_kernel(rec, NULL, 0, &launch, &node), "rcb_cmdbuf_add_kernel", NULL);
    expect_refused(rcb_cmdbuf_add_kernel_params(rec, NULL, 0, &params, &node), "rcb_cmdbuf_add_kernel_params", NULL);
    expect_refused(rcb_cmdbuf_update_kernel(rec, 1, &launch), "rcb_cmdbuf_update_kernel", NULL);
    expect_refused(rcb_cmdbuf_update_kernel_params(rec, 1, &params), "rcb_cmdbuf_update_kernel_params", NULL);
    rcb_node group = 0x5A5A;
    expect_refused(rcb_cmdbuf_add_flattened_child(rec, NULL, 0, cb, NULL, &group, guard(&g)),
                   "rcb_cmdbuf_add_flattened_child", &g);
    expect_refused(rcb_cmdbuf_update_flattened_child(rec, 1, cb, NULL, guard(&g)), "rcb_cmdbuf_update_flattened_child", &g);
    CHECK(node == 0x5A5A && group == 0x5A5A, "a refused add wrote its node");
    size_t nodes = 1;
    NEED(rcb_cmdbuf_node_count(rec, &nodes));
    CHECK(nodes == 0, "refused adds added %zu nodes", nodes);
    NEED(rcb_cmdbuf_free(rec));

    expect_refused(rcb_runtime_load(guard(&g)), "rcb_runtime_load", &g);
    expect_refused(rcb_stream_cache_stats(-1, guard(&g)), "rcb_stream_cache_stats", &g);

    rcb_correlator *c = (rcb_correlator *)(uintptr_t)0x5A5A;
    rcb_correlator_config config;
    memset(&config, 0, sizeof config);
    expect_refused(rcb_correlator_new(&config, &c), "rcb_correlator_new", NULL);
    CHECK(c == (rcb_correlator *)(uintptr_t)0x5A5A, "a refused rcb_correlator_new wrote its handle");
    rcb_correlator_sink sink;
    memset(&sink, 0, sizeof sink);
    expect_refused(rcb_correlator_exchange(NULL, &sink, guard(&g)), "rcb_correlator_exchange", &g);
    expect_refused(rcb_correlator_stats(NULL, guard(&g)), "rcb_correlator_stats", &g);

    rcb_vmm_pool *pool = (rcb_vmm_pool *)(uintptr_t)0x5A5A;
    uint64_t sizes[1] = {BYTES};
    rcb_vmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.backing = RCB_VMM_BACKING_DEVICE;
    pc.num_slots = 2;
    pc.num_buffers = 1;
    pc.buffer_sizes = sizes;
    expect_refused(rcb_vmm_pool_new(&pc, &pool), "rcb_vmm_pool_new", NULL);
    CHECK(pool == (rcb_vmm_pool *)(uintptr_t)0x5A5A, "a refused rcb_vmm_pool_new wrote its handle");
    expect_refused(rcb_vmm_pool_acquire(NULL, guard(&g)), "rcb_vmm_pool_acquire", &g);
    expect_refused(rcb_vmm_pool_acquire_on_stream(NULL, stream, guard(&g)), "rcb_vmm_pool_acquire_on_stream", &g);
    expect_refused(rcb_vmm_pool_release(NULL, guard(&g), stream), "rcb_vmm_pool_release", &g);

    /* dlsym resolves the current version: the sized function, which reads struct_size first. */
    void *self = dlopen("librocm_cmdbuf.so.0", RTLD_NOW | RTLD_NOLOAD);
    CHECK(self != NULL, "the library is not loaded under its SONAME: %s", dlerror());
    if (self != NULL) {
        rcb_status (*current)(rcb_cmdbuf *, const rcb_allocation *, size_t, void *);
        *(void **)&current = dlsym(self, "rcb_cmdbuf_update_allocations");
        uint32_t unsized_report[8] = {0};
        rcb_status s = current(cb, moved, 2, unsized_report);
        CHECK(s == RCB_STATUS_INVALID_ARGUMENT && strstr(message(), "`report->struct_size` is 0") != NULL,
              "dlsym gave a function that returned %d: %s", (int)s, message());
        dlclose(self);
    }

    NEED(rcb_cmdbuf_free(cb));
    NEED(hipFree(a));
    NEED(hipFree(b));
    NEED(hipFree(b2));
    NEED(hipStreamDestroy(stream));
    printf("previous header: %s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
