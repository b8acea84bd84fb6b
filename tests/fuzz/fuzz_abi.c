/* A libFuzzer target over the whole C ABI of include/rocm_cmdbuf.h, on the software GPU.
 *
 * An input is a program of ops. Each op is three parts: a byte choosing the call (modulo the
 * number of ops, in the order of OPS below), a length byte L, and L bytes that its arguments are
 * drawn from; a missing byte reads as 0, and 0 always picks the ordinary, valid choice, so a
 * seed needs only the bytes that differ. The ops create, use and free command buffers (kernels,
 * kernelParams kernels, memcpy, memset, empty, child and raw child nodes, flattening (raw graphs
 * with event record and wait, host, memory-operation and memory allocation nodes, and captures
 * joining a second stream through events), capture,
 * finalize, update, launch, address updates, update budgets, counters), trace caches (with trace functions that work,
 * fail, re-enter their cache or break the capture), streams of the cache, VMM pools of both
 * backings and correlators (with sinks that read every record, stop the exchange or add more
 * events), with valid and hostile arguments alike: NULL, freed and forged handles, double frees,
 * nodes of other command buffers, absurd counts and sizes, sized structs whose struct_size is 0,
 * too small or past the largest accepted, unknown argument kinds, calls in the wrong state,
 * unknown streams and graphs, zero and huge slot counts.
 *
 * Oracle (a breach aborts, which libFuzzer reports as a crash with its input):
 *   - no crash, no ASan/UBSan report, no hang (libFuzzer's -timeout);
 *   - every status is a documented code; RCB_STATUS_PANIC (a library bug caught at the C
 *     boundary) is a finding too;
 *   - a failed call leaves a non-empty last-error message, a successful one an empty message;
 *   - a sized output of a successful call states in its struct_size that all of it was written;
 *   - contracts that hold whatever the input: a live handle's free releases it (a second free is
 *     refused, as is a second release of a stream, also from another thread at the same time, or
 *     of a pool slot), a trace cache called from its own trace_fn refuses, a slot released at the
 *     end lets its pool be freed, NULL is a no-op for every _free;
 *   - calls made where the calling thread's thread-locals are already destroyed (op thread_exit
 *     runs its bytes as ops in a pthread key destructor of a thread that exits, and an atexit
 *     handler runs the first ops of the last input again, then frees everything) hold to the same
 *     oracle, except that a failed call's message may be empty (dropped, never wrong);
 *   - after the input everything is freed, and the software GPU's live-object counters (graphs,
 *     executable graphs, streams, events, allocations, physical VMM handles, reservations,
 *     mappings, modules) are back where they were before it (the harness's own module, stream and
 *     buffers are made once, in LLVMFuzzerInitialize); no stream is left capturing.
 *
 * Preconditions the library cannot check are kept: pointers point to what the header says
 * (arrays of the stated count, values of the stated size). The exceptions are counts above the
 * documented limits, which come with shorter arrays: the library must refuse them before reading.
 * GPU handles (streams, graphs, functions) may be anything: the software GPU looks them up.
 *
 * FUZZ_TRACE=1 in the environment prints each op and the status of each call (for reading a
 * finding or checking that a seed goes where it should).
 *
 * Build and run: ci/fuzz.sh (clang with -fsanitize=fuzzer,address,undefined, linked with
 * -lrocm_cmdbuf and the software GPU's libamdhip64.so). */
#include <hip/hip_runtime_api.h>

#include "rocm_cmdbuf.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t hipsimLiveCount(const char *kind);

/* ---- reading the input ---- */

typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t u8(input *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

static uint32_t u32(input *in) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)u8(in) << (8 * i);
    return v;
}

static uint64_t u64(input *in) {
    uint64_t lo = u32(in);
    return lo | (uint64_t)u32(in) << 32;
}

/* A number below `n` (n <= 256). */
static unsigned pick(input *in, unsigned n) { return u8(in) % n; }

/* The unusual branch, taken when the byte is n-1 modulo n (never for a 0 byte). */
static int rarely(input *in, unsigned n) { return pick(in, n) == n - 1; }

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(in, a) ((a)[pick((in), COUNT(a))])

/* `p`, or NULL one time in 16. */
#define OR_NULL(in, p) (rarely((in), 16) ? NULL : (p))

/* ---- the oracle ---- */

static const char *current_op = "(none)";
static int trace;

/* Set while ops run where the calling thread's thread-locals may be destroyed already (in a
 * pthread key destructor at a thread's exit, in an atexit handler): the library may drop a failed
 * call's message there, never give a wrong one. */
static int exit_time;

/* The first bytes of the last input, which the atexit handler runs again (see exit_calls). */
static uint8_t last_input[256];
static size_t last_input_len;
static int in_atexit;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_abi: finding in op %s%s: ", current_op, in_atexit ? " (run again at exit)" : "");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (in_atexit) {
        /* libFuzzer writes no input for a crash after its loop: the bytes to replay. */
        fprintf(stderr, "fuzz_abi: the last input began with:");
        for (size_t i = 0; i < last_input_len; i++) fprintf(stderr, " %02x", last_input[i]);
        fputc('\n', stderr);
    }
    abort();
}

/* The struct_size of a sized struct of `size` bytes (the rule at the top of rocm_cmdbuf.h): its
 * size, or one time in 16 one the library must refuse before reading past that field: 0, too
 * small, past the largest accepted. Drawn after an op's other bytes, so that older seeds keep
 * their meaning. */
static uint32_t struct_size_arg(input *in, size_t size) {
    const uint32_t wrong[] = {0, (uint32_t)size - 4, 4097, UINT32_MAX};
    return rarely(in, 16) ? PICK(in, wrong) : (uint32_t)size;
}

/* A sized output of `size` bytes that a call reported success on: it says it wrote all of it. */
static void check_written(uint32_t struct_size, size_t size, const char *what) {
    if (struct_size != size) die("%s: struct_size %u after the call, not the %zu bytes written", what, struct_size, size);
}

static rcb_status checked(rcb_status s, const char *call) {
    char msg[512];
    size_t len = rcb_last_error_message(msg, sizeof msg);
    if (trace) fprintf(stderr, "  %s -> %s%s%s\n", call, rcb_status_str(s), len ? ": " : "", msg);
    if (s < RCB_OK || s > RCB_STATUS_PANIC) die("%s returned %d, not a documented rcb_status", call, s);
    if (s == RCB_STATUS_PANIC) die("%s: the library panicked: %s", call, msg);
    if (s != RCB_OK && len == 0 && !exit_time) die("%s failed with %s and left no message", call, rcb_status_str(s));
    if (s == RCB_OK && len != 0) die("%s succeeded but left the message '%s'", call, msg);
    if (len < sizeof msg && strlen(msg) != len) die("%s: message length %zu, %zu bytes copied", call, len, strlen(msg));
    return s;
}

/* Every library call that returns a status goes through CALL. */
#define CALL(expr) checked((expr), #expr)

/* ---- the harness's own GPU objects, made once ---- */

enum { NARENA = 8, ARENA_BYTES = 4096, NKINDS = 9 };

static struct {
    hipModule_t module;
    hipFunction_t fill, axpy, add, copy;
    hipStream_t stream;
    hipStream_t side;        /* a second stream, joined to captures of `stream` through events */
    hipEvent_t events[2];    /* recorded in and waited on by raw graphs and captures */
    int host_calls;          /* what the raw graphs' host nodes count */
    uint64_t arena[NARENA];
    uint64_t oracle[6]; /* the relocation oracle's own buffers and stream: no other op reaches them */
    hipStream_t oracle_stream;
    uint64_t live[NKINDS];
} gpu;

static const char *const LIVE_KINDS[NKINDS] = {"alloc", "physical", "reservation", "mapping", "stream",
                                               "event", "graph",    "exec",        "module"};

/* ---- the objects of one input ---- */

enum { NCB = 4, NNODES = 64, NTC = 2, NPOOL = 2, NHELD = 4, NSTREAM = 4, NCOR = 2, NGRAPH = 2, NSTALE = 16 };

static struct {
    rcb_cmdbuf *cb[NCB];
    /* A launch of cb[i] failed: it may have queued part of its work, so the library keeps what it
     * may use until the harness promises (rcb_cmdbuf_launches_done) that every launch finished. */
    int lost[NCB];
    rcb_node nodes[NNODES]; /* nodes of every command buffer, a ring, newest last */
    size_t nnodes;
    rcb_trace_cache *tc[NTC];
    void *tc_graph[NTC]; /* the graph each cache returned last (borrowed from it) */
    rcb_vmm_pool *pool[NPOOL];
    rcb_vmm_slot held[NPOOL][NHELD];
    int nheld[NPOOL];
    void *streams[NSTREAM]; /* held from the stream cache */
    rcb_correlator *cor[NCOR];
    hipGraph_t graphs[NGRAPH]; /* raw graphs the harness owns */
    void *borrowed_graph;      /* a template rcb_cmdbuf_graph lent out (may have gone stale) */
    void *stale[NSTALE];       /* freed handles of every kind, and released streams */
    size_t nstale;
} st;

static void remember_stale(void *h) { st.stale[st.nstale++ % NSTALE] = h; }

static void *stale_handle(input *in) {
    size_t n = st.nstale < NSTALE ? st.nstale : NSTALE;
    return n ? st.stale[pick(in, 256) % n] : NULL;
}

/* A handle argument: a live slot (mostly), NULL, a freed handle, or a forged value. */
static void *handle_arg(input *in, void *const *live, size_t n) {
    switch (pick(in, 12)) {
    case 8: return NULL;
    case 9: return stale_handle(in);
    case 10: return (void *)(uintptr_t)u64(in);
    case 11: return (void *)(uintptr_t)(0x1000 + 16 * (uint64_t)u8(in)); /* looks like a handle id */
    default: return live[pick(in, (unsigned)n)];
    }
}

#define CB_ARG(in) ((rcb_cmdbuf *)handle_arg((in), (void *const *)st.cb, NCB))
#define TC_ARG(in) ((rcb_trace_cache *)handle_arg((in), (void *const *)st.tc, NTC))
#define POOL_ARG(in) ((rcb_vmm_pool *)handle_arg((in), (void *const *)st.pool, NPOOL))
#define COR_ARG(in) ((rcb_correlator *)handle_arg((in), (void *const *)st.cor, NCOR))

static int capturing(hipStream_t s) {
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    return hipStreamIsCapturing(s, &status) == hipSuccess && status != hipStreamCaptureStatusNone;
}

/* A stream: the harness's (mostly), one held from the cache, the default, a released one, or
 * a forged value. */
static void *stream_arg(input *in) {
    switch (pick(in, 10)) {
    case 6: return st.streams[pick(in, NSTREAM)];
    case 7: return NULL;
    case 8: return stale_handle(in);
    case 9: return (void *)(uintptr_t)u64(in);
    default: return gpu.stream;
    }
}

/* A graph: a raw graph of the harness (mostly), a cache's, a borrowed template, or junk. */
static void *graph_arg(input *in) {
    switch (pick(in, 8)) {
    case 4: return st.tc_graph[pick(in, NTC)];
    case 5: return st.borrowed_graph;
    case 6: return NULL;
    case 7: return (void *)(uintptr_t)u64(in);
    default: return st.graphs[pick(in, NGRAPH)];
    }
}

static void *function_arg(input *in) {
    switch (pick(in, 8)) {
    case 1: return gpu.axpy;
    case 2: return gpu.add;
    case 3: return gpu.copy;
    case 6: return NULL;
    case 7: return (void *)(uintptr_t)u64(in);
    default: return gpu.fill;
    }
}

/* A device address: mostly inside a harness buffer, else one past its end, 0 or anything. */
static uint64_t address(input *in) {
    unsigned c = pick(in, 10);
    uint64_t base = gpu.arena[pick(in, NARENA)];
    switch (c) {
    case 7: return base + ARENA_BYTES;
    case 8: return 0;
    case 9: return u64(in);
    default: return base + 64 * (uint64_t)pick(in, ARENA_BYTES / 64);
    }
}

static const uint64_t COUNTS[] = {64, 16, 1, 0, 2, 63, 1024, 1025, 4096, UINT64_MAX, 1ull << 40};

static uint64_t count_arg(input *in) { return rarely(in, 8) ? u64(in) : PICK(in, COUNTS); }

/* A node: one of the last eight added to any command buffer (mostly), 0 or junk. */
static rcb_node node_arg(input *in) {
    switch (pick(in, 8)) {
    case 6: return 0;
    case 7: return u64(in);
    default: {
        size_t back = pick(in, 8);
        return st.nnodes > back ? st.nodes[(st.nnodes - 1 - back) % NNODES] : 0;
    }
    }
}

static void remember_node(rcb_node n) { st.nodes[st.nnodes++ % NNODES] = n; }

/* Dependencies: none (mostly), up to 8 nodes, NULL with a count, or a count beyond any
 * command buffer's node count with a short array. */
static rcb_node deps_buf[8];

static const rcb_node *deps_arg(input *in, size_t *ndeps) {
    switch (pick(in, 8)) {
    case 0: *ndeps = 0; return NULL;
    case 6: *ndeps = 1; return NULL;
    case 7: *ndeps = (size_t)u32(in) + 9; return deps_buf;
    default:
        *ndeps = pick(in, 9);
        for (size_t i = 0; i < *ndeps; i++) deps_buf[i] = node_arg(in);
        return deps_buf;
    }
}

/* ---- kernel launches ---- */

static uint8_t arg_values[16][32768];
static rcb_kernel_arg args_buf[16];
static uint8_t param_cells[4][16];
static void *params_buf[4];

static void dims(input *in, uint32_t grid[3], uint32_t block[3]) {
    for (int i = 0; i < 3; i++) grid[i] = rarely(in, 8) ? u32(in) : 1;
    for (int i = 0; i < 3; i++) block[i] = rarely(in, 8) ? u32(in) : (i == 0 ? 64 : 1);
}

/* A launch of up to 16 arguments, each of a chosen size and kind; its value is an address, a
 * count or raw bytes. Sizes above the largest blob, and counts above RCB_MAX_KERNEL_ARGS, come
 * without the bytes (the library must refuse them before reading). */
static void launch_arg(input *in, rcb_kernel_launch *l) {
    static const uint32_t sizes[] = {8, 4, 1, 2, 12, 16, 24, 7, 0, 32764, 32765, UINT32_MAX};
    l->function = function_arg(in);
    dims(in, l->grid, l->block);
    l->shared_mem_bytes = rarely(in, 8) ? u32(in) : 0;
    unsigned c = pick(in, 32);
    l->num_args = c < COUNT(args_buf) + 1 ? c : c == 31 ? RCB_MAX_KERNEL_ARGS + 1 + (size_t)u8(in) : 3;
    l->args = l->num_args == 0 && rarely(in, 2) ? NULL : args_buf;
    for (size_t i = 0; i < l->num_args && i < COUNT(args_buf); i++) {
        rcb_kernel_arg *a = &args_buf[i];
        uint8_t *v = arg_values[i];
        a->size = PICK(in, sizes);
        unsigned k = pick(in, 8);
        a->kind = k < 5 ? (uint32_t)k % 3 : k == 7 ? 3 + u8(in) : RCB_ARG_SCAN;
        a->value = rarely(in, 32) ? NULL : v;
        if (a->kind == RCB_ARG_ALLOCATION && !rarely(in, 4)) {
            /* Mostly well formed: a table index (maybe past the table) and a small offset. */
            rcb_arg_allocation named = {pick(in, 20), 64 * (uint64_t)pick(in, 80)};
            a->size = sizeof named;
            memcpy(v, &named, sizeof named);
            continue;
        }
        if (a->size > sizeof arg_values[i]) continue; /* refused before its bytes are read */
        memset(v, 0, a->size);
        switch (a->size == 8 ? pick(in, 3) : 2) {
        case 0: {
            uint64_t p = address(in);
            memcpy(v, &p, 8);
            break;
        }
        case 1: {
            uint64_t n = count_arg(in);
            memcpy(v, &n, 8);
            break;
        }
        default:
            for (uint32_t b = 0; b < a->size && b < 16; b++) v[b] = u8(in);
        }
    }
    l->struct_size = struct_size_arg(in, sizeof *l);
}

static void params_arg(input *in, rcb_kernel_params_launch *l) {
    l->function = function_arg(in);
    dims(in, l->grid, l->block);
    l->shared_mem_bytes = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t v = rarely(in, 3) ? count_arg(in) : address(in);
        memset(param_cells[i], 0, sizeof param_cells[i]);
        memcpy(param_cells[i], &v, 8);
        params_buf[i] = param_cells[i];
    }
    l->kernel_params = rarely(in, 8) ? NULL : params_buf;
    l->struct_size = struct_size_arg(in, sizeof *l);
}

/* ---- allocation tables ---- */

static rcb_allocation table_buf[16];
static rcb_allocation_move moves_buf[8];

/* A whole harness buffer (mostly), or anything. */
static rcb_allocation allocation_arg(input *in) {
    static const uint64_t sizes[] = {ARENA_BYTES, 64, 0, 1, 1ull << 20, UINT64_MAX};
    rcb_allocation a;
    unsigned i = pick(in, NARENA);
    a.base = rarely(in, 4) ? address(in) : gpu.arena[i];
    a.size = rarely(in, 8) ? u64(in) : PICK(in, sizes);
    return a;
}

static const rcb_allocation *table_arg(input *in, size_t *n) {
    static const size_t counts[] = {2, 1, 0, 3, 4, 8, 16, RCB_MAX_ALLOCATIONS + 1};
    *n = PICK(in, counts);
    for (size_t i = 0; i < *n && i < COUNT(table_buf); i++) table_buf[i] = allocation_arg(in);
    return *n == 0 && rarely(in, 2) ? NULL : table_buf;
}

static const rcb_allocation_move *moves_arg(input *in, size_t *n) {
    *n = rarely(in, 16) ? (size_t)1 << 40 : pick(in, COUNT(moves_buf) + 1);
    for (size_t i = 0; i < *n && i < COUNT(moves_buf); i++) {
        moves_buf[i].index = rarely(in, 8) ? u64(in) : pick(in, 17);
        unsigned b = pick(in, NARENA);
        moves_buf[i].base = rarely(in, 4) ? address(in) : gpu.arena[b];
    }
    return *n == 0 && rarely(in, 2) ? NULL : moves_buf;
}

/* ---- trace functions ---- */

typedef struct {
    int mode;
    uint64_t address;
    rcb_trace_cache *tc; /* the cache being called, for the re-entry checks */
} trace_ctx;

static int32_t trace_fn(void *user_data, void *stream) {
    trace_ctx *t = user_data;
    switch (t->mode) {
    case 1: /* a memset */
        hipMemsetD32Async((hipDeviceptr_t)(uintptr_t)t->address, 5, 16, (hipStream_t)stream);
        return 0;
    case 2: return 0; /* nothing captured */
    case 3: return 7; /* the command failed */
    case 4: {         /* calls back into its own cache: refused, never a deadlock */
        void *graph = NULL;
        uint32_t outcome = 0;
        rcb_status s = CALL(rcb_trace_cache_get_or_trace(t->tc, stream, NULL, 0, trace_fn, t, &graph, &outcome));
        if (s != RCB_STATUS_INVALID_STATE) die("a trace cache called from its trace_fn returned %s", rcb_status_str(s));
        s = CALL(rcb_trace_cache_free(t->tc));
        if (s != RCB_STATUS_INVALID_STATE) die("a trace cache freed from its trace_fn returned %s", rcb_status_str(s));
        return 0;
    }
    case 5: /* breaks the capture: synchronizing a capturing stream invalidates it */
        hipStreamSynchronize((hipStream_t)stream);
        return 0;
    default: { /* a kernel writing into the first allocation */
        uint64_t n = 16;
        uint32_t v = 7;
        void *params[] = {&t->address, &v, &n};
        hipModuleLaunchKernel(gpu.fill, 1, 1, 1, 64, 1, 1, 0, (hipStream_t)stream, params, NULL);
        return 0;
    }
    }
}

/* ---- correlator sinks ---- */

typedef struct {
    int stop_after; /* batches before a callback says stop; -1: never */
    rcb_correlator *c;
    uint64_t sum;
} sink_ctx;

static int32_t sink_step(sink_ctx *s) {
    rcb_correlator_counters counters;
    counters.struct_size = sizeof counters;
    CALL(rcb_correlator_stats(s->c, &counters)); /* allowed from a callback */
    if (s->stop_after < 0) return 0;
    return s->stop_after-- == 0 ? 1 : 0;
}

static int32_t on_activities(void *user_data, uint32_t device, uint64_t device_records,
                             const rcb_correlated_activity *records, size_t n) {
    sink_ctx *s = user_data;
    if (n == 0 || n > RCB_CORRELATOR_BATCH || device_records < n) die("an activity batch of %zu of %llu", n, (unsigned long long)device_records);
    for (size_t i = 0; i < n; i++) {
        const rcb_activity *a = records[i].activity;
        if (a == NULL) die("an activity record without its activity");
        if (a->device_id != device) die("an activity of device %u in a batch of device %u", a->device_id, device);
        s->sum += a->correlation_id + a->end_ns;
        if (records[i].api != NULL && records[i].api->correlation_id != a->correlation_id) die("an activity joined to another id");
    }
    return sink_step(s);
}

static int32_t on_api_events(void *user_data, uint32_t device, uint64_t device_records,
                             const rcb_correlated_api_event *records, size_t n) {
    sink_ctx *s = user_data;
    (void)device;
    if (n == 0 || n > RCB_CORRELATOR_BATCH || device_records < n) die("an API event batch of %zu", n);
    for (size_t i = 0; i < n; i++) {
        if (records[i].api == NULL) die("an API event record without its event");
        s->sum += records[i].api->correlation_id + records[i].activities;
        if (records[i].first_activity != NULL) s->sum += records[i].first_activity->start_ns;
    }
    return sink_step(s);
}

static int32_t on_reports(void *user_data, const rcb_correlation_report *reports, size_t n) {
    sink_ctx *s = user_data;
    if (n == 0 || n > RCB_CORRELATOR_BATCH) die("a report batch of %zu", n);
    for (size_t i = 0; i < n; i++) s->sum += reports[i].correlation_id + reports[i].activities;
    return sink_step(s);
}

/* Few distinct correlation ids (so that joins, drops and duplicates happen), some past 2^32. */
static uint64_t correlation_id(input *in) {
    uint64_t id = pick(in, 16);
    return id + (1ull << 32) * pick(in, 3);
}

static rcb_api_event events_buf[8];
static rcb_activity activities_buf[8];

static void event_arg(input *in, rcb_api_event *e) {
    e->correlation_id = correlation_id(in);
    e->start_ns = u8(in);
    e->end_ns = e->start_ns + u8(in);
    e->name = u8(in);
    e->thread_id = pick(in, 4);
    e->kind = u8(in);
    e->flags = rarely(in, 8) ? u32(in) : pick(in, 2);
}

static void activity_arg(input *in, rcb_activity *a) {
    a->correlation_id = correlation_id(in);
    a->start_ns = u8(in);
    a->end_ns = a->start_ns + u8(in);
    a->name = u8(in);
    a->stream_id = pick(in, 4);
    a->device_id = rarely(in, 8) ? RCB_DEVICE_NONE : pick(in, 3);
    a->kind = u8(in);
}

/* ---- the ops ---- */

static const int32_t DEVICES[] = {0, 1, -1, 2, 16, INT32_MAX};

static void op_cmdbuf_new(input *in) {
    unsigned slot = pick(in, NCB);
    int nested = rarely(in, 3);
    int32_t device = PICK(in, DEVICES);
    rcb_cmdbuf **out = OR_NULL(in, &st.cb[slot]);
    if (st.cb[slot] != NULL) return; /* keep the live one */
    CALL(nested ? rcb_cmdbuf_new_nested(device, out) : rcb_cmdbuf_new(device, out));
}

static int in_table(void *const *table, size_t n, const void *h) {
    for (size_t i = 0; h != NULL && i < n; i++) {
        if (table[i] == h) return (int)i;
    }
    return -1;
}

/* Frees `h` with `free_fn`; a live one must be released (a second free refused), NULL must be
 * a no-op. Returns the status. */
static rcb_status free_checked(void *h, void **table, size_t n, rcb_status (*free_fn)(void *), const char *what) {
    rcb_status s = checked(free_fn(h), what);
    if (h == NULL && s != RCB_OK) die("%s(NULL) returned %s", what, rcb_status_str(s));
    int i = in_table(table, n, h);
    if (i < 0) return s;
    if (s == RCB_STATUS_INVALID_HANDLE) die("%s of a live handle returned %s", what, rcb_status_str(s));
    if (checked(free_fn(h), what) != RCB_STATUS_INVALID_HANDLE) die("a second %s was not refused", what);
    table[i] = NULL;
    remember_stale(h);
    return s;
}

static rcb_status cmdbuf_free(void *h) { return rcb_cmdbuf_free(h); }
static rcb_status trace_cache_free(void *h) { return rcb_trace_cache_free(h); }
static rcb_status correlator_free(void *h) { return rcb_correlator_free(h); }

static void settle(void);

/* Frees `cb`; after a failed launch of it, first waits for every stream and promises that its
 * launches finished, so that the free destroys what they used instead of leaking it. */
static void free_cmdbuf(rcb_cmdbuf *cb) {
    int i = in_table((void **)st.cb, NCB, cb);
    if (i >= 0 && st.lost[i]) {
        settle();
        CALL(rcb_cmdbuf_launches_done(cb));
        st.lost[i] = 0;
    }
    free_checked(cb, (void **)st.cb, NCB, cmdbuf_free, "rcb_cmdbuf_free");
    st.borrowed_graph = NULL; /* it may have gone with its command buffer */
}

static void op_cmdbuf_free(input *in) { free_cmdbuf(CB_ARG(in)); }

static void op_set_allocations(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t n;
    const rcb_allocation *t = table_arg(in, &n);
    CALL(rcb_cmdbuf_set_allocations(cb, t, n));
}

static void op_add_kernel(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    rcb_kernel_launch l;
    launch_arg(in, &l);
    const rcb_kernel_launch *lp = OR_NULL(in, &l);
    rcb_node node = 0, *out = OR_NULL(in, &node);
    if (CALL(rcb_cmdbuf_add_kernel(cb, deps, ndeps, lp, out)) == RCB_OK) remember_node(node);
}

static void op_add_kernel_params(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    rcb_kernel_params_launch l;
    params_arg(in, &l);
    const rcb_kernel_params_launch *lp = OR_NULL(in, &l);
    rcb_node node = 0, *out = OR_NULL(in, &node);
    if (CALL(rcb_cmdbuf_add_kernel_params(cb, deps, ndeps, lp, out)) == RCB_OK) remember_node(node);
}

static void op_add_memcpy(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    uint64_t dst = address(in), src = address(in), bytes = count_arg(in);
    rcb_node node = 0, *out = OR_NULL(in, &node);
    if (CALL(rcb_cmdbuf_add_memcpy_d2d(cb, deps, ndeps, dst, src, bytes, out)) == RCB_OK) remember_node(node);
}

static const uint32_t ELEMENT_SIZES[] = {4, 1, 2, 0, 3, 8};

static void op_add_memset(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    uint64_t dst = address(in);
    uint32_t pattern = rarely(in, 4) ? u32(in) : u8(in);
    uint32_t element = PICK(in, ELEMENT_SIZES);
    uint64_t count = count_arg(in);
    rcb_node node = 0, *out = OR_NULL(in, &node);
    if (CALL(rcb_cmdbuf_add_memset(cb, deps, ndeps, dst, pattern, element, count, out)) == RCB_OK) remember_node(node);
}

static void op_add_empty(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    rcb_node node = 0, *out = OR_NULL(in, &node);
    if (CALL(rcb_cmdbuf_add_empty(cb, deps, ndeps, out)) == RCB_OK) remember_node(node);
}

static void op_add_child(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    rcb_cmdbuf *child = CB_ARG(in);
    rcb_node node = 0, *out = OR_NULL(in, &node);
    if (CALL(rcb_cmdbuf_add_child(cb, deps, ndeps, child, out)) == RCB_OK) remember_node(node);
}

static void op_add_child_graph(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    void *graph = graph_arg(in);
    rcb_node node = 0, *out = OR_NULL(in, &node);
    if (CALL(rcb_cmdbuf_add_child_graph(cb, deps, ndeps, graph, out)) == RCB_OK) remember_node(node);
}

static void op_add_flattened_child(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t ndeps;
    const rcb_node *deps = deps_arg(in, &ndeps);
    unsigned c = pick(in, 4); /* 0: a raw graph, 1: a command buffer, 2: both, 3: neither */
    rcb_cmdbuf *child = c == 1 || c == 2 ? CB_ARG(in) : NULL;
    void *graph = c == 0 || c == 2 ? graph_arg(in) : NULL;
    rcb_node group = 0, *out = OR_NULL(in, &group);
    rcb_flatten_report report;
    memset(&report, 0xA5, sizeof report);
    rcb_flatten_report *rp = OR_NULL(in, &report);
    report.struct_size = struct_size_arg(in, sizeof report);
    if (CALL(rcb_cmdbuf_add_flattened_child(cb, deps, ndeps, child, graph, out, rp)) != RCB_OK) return;
    remember_node(group);
    check_written(report.struct_size, sizeof report, "a flatten report");
    if (memchr(report.reason, 0, sizeof report.reason) == NULL) die("the flatten report's reason is not NUL-terminated");
    if (report.flattened > 1) die("the flatten report says flattened = %u", report.flattened);
    if (report.flattened == 0 && report.reason[0] == '\0') die("a fallback without a reason");
}

static void op_update_kernel(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    rcb_node node = node_arg(in);
    rcb_kernel_launch l;
    launch_arg(in, &l);
    CALL(rcb_cmdbuf_update_kernel(cb, node, OR_NULL(in, &l)));
}

static void op_update_kernel_params(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    rcb_node node = node_arg(in);
    rcb_kernel_params_launch l;
    params_arg(in, &l);
    CALL(rcb_cmdbuf_update_kernel_params(cb, node, OR_NULL(in, &l)));
}

static void op_update_memcpy(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    rcb_node node = node_arg(in);
    uint64_t dst = address(in), src = address(in), bytes = count_arg(in);
    CALL(rcb_cmdbuf_update_memcpy_d2d(cb, node, dst, src, bytes));
}

static void op_update_memset(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    rcb_node node = node_arg(in);
    uint64_t dst = address(in);
    uint32_t pattern = u8(in);
    uint32_t element = PICK(in, ELEMENT_SIZES);
    uint64_t count = count_arg(in);
    CALL(rcb_cmdbuf_update_memset(cb, node, dst, pattern, element, count));
}

static void op_update_child(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    rcb_node node = node_arg(in);
    rcb_cmdbuf *child = CB_ARG(in);
    CALL(rcb_cmdbuf_update_child(cb, node, child));
}

/* Begins a capture, issues up to three fills on the stream, and ends it unless told not to. */
static void op_capture(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    void *stream = stream_arg(in);
    if (CALL(rcb_cmdbuf_capture_begin(cb, stream)) != RCB_OK) return;
    unsigned work = pick(in, 4);
    for (unsigned i = 0; i < work; i++) {
        uint64_t dst = address(in), n = count_arg(in);
        uint32_t v = u8(in);
        void *params[] = {&dst, &v, &n};
        hipModuleLaunchKernel(gpu.fill, 1, 1, 1, 64, 1, 1, 0, (hipStream_t)stream, params, NULL);
    }
    /* A capture left open at a thread's exit could never be ended (it is thread-local, and only
     * the thread that began it can end it): the stream would capture for the rest of the
     * process. At exit time (a thread's, or the process's in the atexit handler) the capture is
     * always ended; the byte is read either way, so that older inputs keep their meaning. */
    int leave_open = rarely(in, 3);
    if (!leave_open || exit_time) CALL(rcb_cmdbuf_capture_end(cb));
}

static void op_capture_end(input *in) { CALL(rcb_cmdbuf_capture_end(CB_ARG(in))); }

static void op_finalize(input *in) { CALL(rcb_cmdbuf_finalize(CB_ARG(in))); }

static void op_begin_update(input *in) { CALL(rcb_cmdbuf_begin_update(CB_ARG(in))); }

static void op_launch(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    void *stream = stream_arg(in);
    if (CALL(rcb_cmdbuf_launch(cb, stream)) == RCB_STATUS_RUNTIME_ERROR) {
        int i = in_table((void **)st.cb, NCB, cb);
        if (i >= 0) st.lost[i] = 1;
    }
}

static void op_queries(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    unsigned which = pick(in, 5);
    int null_out = rarely(in, 8);
    void *graph = NULL, *exec = NULL;
    size_t count = 0;
    rcb_memory_use kept;
    switch (which) {
    case 0:
        if (CALL(rcb_cmdbuf_graph(cb, null_out ? NULL : &graph)) == RCB_OK) st.borrowed_graph = graph;
        break;
    case 1: CALL(rcb_cmdbuf_exec(cb, null_out ? NULL : &exec)); break;
    case 2: CALL(rcb_cmdbuf_node_count(cb, null_out ? NULL : &count)); break;
    case 3: CALL(rcb_cmdbuf_site_count(cb, null_out ? NULL : &count)); break;
    default:
        kept.struct_size = struct_size_arg(in, sizeof kept);
        if (CALL(rcb_cmdbuf_memory_use(cb, null_out ? NULL : &kept)) == RCB_OK) {
            check_written(kept.struct_size, sizeof kept, "a memory use");
            uint64_t parts = kept.argument_copies + kept.node_records + kept.node_lists + kept.site_lists +
                             kept.allocation_table + kept.update_scratch + kept.other;
            if (kept.total_bytes != parts || kept.argument_copies != kept.argument_bytes)
                die("memory use: total %llu, parts %llu, copies %llu, argument bytes %llu",
                    (unsigned long long)kept.total_bytes, (unsigned long long)parts,
                    (unsigned long long)kept.argument_copies, (unsigned long long)kept.argument_bytes);
        }
        break;
    }
}

static void check_report(const rcb_update_report *r) {
    check_written(r->struct_size, sizeof *r, "an update report");
    if (r->needs_rerecord > 1) die("an update report with needs_rerecord = %u", r->needs_rerecord);
    if (r->moved_allocations == 0 && (r->patched_sites != 0 || r->updated_nodes != 0))
        die("an update report with nothing moved but %llu sites patched", (unsigned long long)r->patched_sites);
}

static void op_update_allocations(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t n;
    const rcb_allocation *t = table_arg(in, &n);
    rcb_update_report r, *rp = OR_NULL(in, &r);
    r.struct_size = struct_size_arg(in, sizeof r);
    if (CALL(rcb_cmdbuf_update_allocations(cb, t, n, rp)) == RCB_OK) check_report(&r);
}

static void op_move_allocations(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    size_t n;
    const rcb_allocation_move *m = moves_arg(in, &n);
    rcb_update_report r, *rp = OR_NULL(in, &r);
    r.struct_size = struct_size_arg(in, sizeof r);
    if (CALL(rcb_cmdbuf_move_allocations(cb, m, n, rp)) == RCB_OK) check_report(&r);
}


/* ---- the relocation oracle ----
 * A random table over the oracle's buffers, with aliased, nested, overlapping and empty entries;
 * kernels whose pointers each come from one entry (given as an address, or named with
 * RCB_ARG_ALLOCATION); random moves. An update in place that is not refused must leave exactly
 * the memory that a fresh record at the new addresses leaves, over every buffer. */

enum { ORACLE_OLD = 4, ORACLE_BUFFERS = 6, ORACLE_FLOATS = 32, ORACLE_SPAN = 16, ORACLE_ENTRIES = 8, ORACLE_KERNELS = 4 };

typedef struct {
    unsigned buffer, start, len; /* in floats */
} oracle_view;

typedef struct {
    unsigned which;     /* 0 fill, 1 add, 2 axpy */
    unsigned ptr[3][3]; /* entry, offset in floats, named */
    uint32_t value;
} oracle_kernel;

static void hip_or_die(hipError_t e, const char *what);

static uint64_t oracle_address(const oracle_view *v, unsigned offset) {
    return gpu.oracle[v->buffer] + 4 * (uint64_t)(v->start + offset);
}

/* `names`: pointers named as the kernel says; 0: every pointer as its address (the fresh record,
 * which must not depend on how names are decoded). */
static rcb_cmdbuf *oracle_record(const oracle_view *views, unsigned nviews, const oracle_kernel *ks, unsigned nk, int names) {
    rcb_allocation table[ORACLE_ENTRIES];
    for (unsigned i = 0; i < nviews; i++) table[i] = (rcb_allocation){oracle_address(&views[i], 0), 4 * (uint64_t)views[i].len};
    rcb_cmdbuf *cb = NULL;
    if (CALL(rcb_cmdbuf_new(0, &cb)) != RCB_OK) return NULL;
    if (CALL(rcb_cmdbuf_set_allocations(cb, table, nviews)) != RCB_OK) goto fail;
    rcb_node prev = 0;
    for (unsigned k = 0; k < nk; k++) {
        const oracle_kernel *o = &ks[k];
        uint64_t addresses[3], n = ORACLE_SPAN;
        rcb_arg_allocation named[3];
        rcb_kernel_arg args[4];
        unsigned nptr = o->which == 0 ? 1 : o->which == 1 ? 3 : 2, a = 0;
        for (unsigned p = 0; p < nptr; p++) {
            const unsigned *q = o->ptr[p];
            addresses[p] = oracle_address(&views[q[0]], q[1]);
            named[p] = (rcb_arg_allocation){q[0], 4 * (uint64_t)q[1]};
            args[a++] = q[2] && names ? (rcb_kernel_arg){&named[p], sizeof named[p], RCB_ARG_ALLOCATION}
                             : (rcb_kernel_arg){&addresses[p], 8, RCB_ARG_DEVICE_PTR};
            if (o->which == 0) args[a++] = (rcb_kernel_arg){&o->value, 4, RCB_ARG_VALUE};
            if (o->which == 2 && p == 1) args[a++] = (rcb_kernel_arg){&o->value, 4, RCB_ARG_VALUE}; /* a = bits */
        }
        args[a++] = (rcb_kernel_arg){&n, 8, RCB_ARG_VALUE};
        void *f = o->which == 0 ? gpu.fill : o->which == 1 ? gpu.add : gpu.axpy;
        rcb_kernel_launch l = {sizeof(rcb_kernel_launch), f, {1, 1, 1}, {64, 1, 1}, 0, args, a};
        if (CALL(rcb_cmdbuf_add_kernel(cb, k ? &prev : NULL, k ? 1 : 0, &l, &prev)) != RCB_OK) goto fail;
    }
    if (CALL(rcb_cmdbuf_finalize(cb)) == RCB_OK) return cb;
fail:
    rcb_cmdbuf_free(cb);
    return NULL;
}

/* Runs `cb` on the oracle's buffers, all set to the same starting values, and reads them back. */
static int oracle_run(rcb_cmdbuf *cb, float out[ORACLE_BUFFERS][ORACLE_FLOATS]) {
    for (unsigned b = 0; b < ORACLE_BUFFERS; b++) {
        float init[ORACLE_FLOATS];
        for (unsigned i = 0; i < ORACLE_FLOATS; i++) init[i] = (float)(b * 100 + i);
        hip_or_die(hipMemcpyHtoD((void *)(uintptr_t)gpu.oracle[b], init, sizeof init), "hipMemcpyHtoD");
    }
    if (CALL(rcb_cmdbuf_launch(cb, gpu.oracle_stream)) != RCB_OK) return 0;
    hip_or_die(hipStreamSynchronize(gpu.oracle_stream), "hipStreamSynchronize");
    for (unsigned b = 0; b < ORACLE_BUFFERS; b++)
        hip_or_die(hipMemcpyDtoH(out[b], (void *)(uintptr_t)gpu.oracle[b], sizeof out[b]), "hipMemcpyDtoH");
    return 1;
}

static void op_relocation_oracle(input *in) {
    static const unsigned lens[] = {ORACLE_FLOATS, ORACLE_FLOATS, ORACLE_SPAN, 0};
    oracle_view old[ORACLE_ENTRIES], moved[ORACLE_ENTRIES];
    unsigned n = 1 + pick(in, ORACLE_ENTRIES), usable[ORACLE_ENTRIES], nusable = 0;
    for (unsigned i = 0; i < n; i++) {
        if (i > 0 && rarely(in, 4)) {
            old[i] = old[pick(in, i)]; /* an alias */
        } else {
            unsigned len = PICK(in, lens);
            unsigned start = len == ORACLE_FLOATS ? 0 : 8 * pick(in, len == 0 ? 5 : 3);
            old[i] = (oracle_view){pick(in, ORACLE_OLD), start, len};
        }
        if (old[i].len >= ORACLE_SPAN) usable[nusable++] = i;
    }
    if (nusable == 0) return;
    oracle_kernel ks[ORACLE_KERNELS];
    unsigned nk = 1 + pick(in, ORACLE_KERNELS);
    for (unsigned k = 0; k < nk; k++) {
        ks[k].which = pick(in, 3);
        ks[k].value = ks[k].which == 2 ? 0x40000000u /* 2.0f */ : u8(in);
        for (unsigned p = 0; p < 3; p++) {
            unsigned e = usable[pick(in, nusable)];
            ks[k].ptr[p][0] = e;
            ks[k].ptr[p][1] = old[e].len == ORACLE_FLOATS ? ORACLE_SPAN * pick(in, 2) : 0;
            ks[k].ptr[p][2] = pick(in, 3) == 0;
        }
    }
    /* Moves: each entry stays, goes to the same place in a spare buffer, or to another entry's
     * place of the same length; a whole buffer's entries may go together. */
    for (unsigned i = 0; i < n; i++) moved[i] = old[i];
    unsigned together = pick(in, ORACLE_OLD + 1);
    for (unsigned i = 0; i < n; i++) {
        unsigned c = pick(in, 4);
        if (old[i].buffer == together) moved[i].buffer = ORACLE_OLD;
        else if (c == 1) moved[i].buffer = ORACLE_OLD + pick(in, ORACLE_BUFFERS - ORACLE_OLD);
        else if (c == 2) {
            oracle_view other = old[pick(in, n)];
            if (other.len == old[i].len) moved[i] = other;
        }
    }
    rcb_cmdbuf *cb = oracle_record(old, n, ks, nk, 1);
    if (cb == NULL) return;
    rcb_update_report r;
    r.struct_size = sizeof r;
    rcb_status s;
    if (pick(in, 2)) {
        rcb_allocation table[ORACLE_ENTRIES];
        for (unsigned i = 0; i < n; i++) table[i] = (rcb_allocation){oracle_address(&moved[i], 0), 4 * (uint64_t)moved[i].len};
        s = CALL(rcb_cmdbuf_update_allocations(cb, table, n, &r));
    } else {
        rcb_allocation_move m[ORACLE_ENTRIES];
        size_t nm = 0;
        for (unsigned i = 0; i < n; i++)
            if (oracle_address(&moved[i], 0) != oracle_address(&old[i], 0) || rarely(in, 4))
                m[nm++] = (rcb_allocation_move){i, oracle_address(&moved[i], 0)};
        s = CALL(rcb_cmdbuf_move_allocations(cb, m, nm, &r));
    }
    if (s == RCB_OK && !r.needs_rerecord) {
        static float updated[ORACLE_BUFFERS][ORACLE_FLOATS], fresh[ORACLE_BUFFERS][ORACLE_FLOATS];
        rcb_cmdbuf *again = oracle_record(moved, n, ks, nk, 0);
        if (again != NULL && oracle_run(cb, updated) && oracle_run(again, fresh) && memcmp(updated, fresh, sizeof fresh) != 0)
            die("an update in place differs from a fresh record at the new addresses (%u entries, %u kernels)", n, nk);
        rcb_cmdbuf_free(again);
    }
    rcb_cmdbuf_free(cb);
}

static void op_trace_cache_new(input *in) {
    static const size_t capacities[] = {2, 1, 4, 0, RCB_TRACE_CACHE_MAX_CAPACITY, RCB_TRACE_CACHE_MAX_CAPACITY + 1, SIZE_MAX};
    unsigned slot = pick(in, NTC);
    size_t capacity = PICK(in, capacities);
    rcb_trace_cache **out = OR_NULL(in, &st.tc[slot]);
    if (st.tc[slot] != NULL) return;
    CALL(rcb_trace_cache_new(capacity, out));
    st.tc_graph[slot] = NULL;
}

static void free_trace_cache(rcb_trace_cache *tc) {
    int i = in_table((void *const *)st.tc, NTC, tc);
    free_checked(tc, (void **)st.tc, NTC, trace_cache_free, "rcb_trace_cache_free");
    if (i >= 0) st.tc_graph[i] = NULL;
}

static void op_trace_cache_free(input *in) { free_trace_cache(TC_ARG(in)); }

static void op_get_or_trace(input *in) {
    rcb_trace_cache *tc = TC_ARG(in);
    void *stream = stream_arg(in);
    size_t n;
    const rcb_allocation *allocs = table_arg(in, &n);
    trace_ctx t = {(int)pick(in, 8), n && allocs ? allocs[0].base : address(in), tc};
    rcb_trace_fn fn = OR_NULL(in, trace_fn);
    void *graph = NULL, **graph_out = OR_NULL(in, &graph);
    uint32_t outcome = 99, *outcome_out = OR_NULL(in, &outcome);
    rcb_status s = CALL(rcb_trace_cache_get_or_trace(tc, stream, allocs, n, fn, &t, graph_out, outcome_out));
    if (s == RCB_OK && (outcome > RCB_TRACE_UNCACHED || graph == NULL)) die("get_or_trace: outcome %u, graph %p", outcome, graph);
    int i = in_table((void *const *)st.tc, NTC, tc);
    if (i >= 0) st.tc_graph[i] = s == RCB_OK ? graph : NULL;
}

static void op_stream_acquire(input *in) {
    static const uint32_t flags[] = {0, 1, 2, UINT32_MAX};
    static const int32_t priorities[] = {0, -1, 1, INT32_MIN, INT32_MAX};
    unsigned slot = pick(in, NSTREAM);
    int32_t device = PICK(in, DEVICES);
    uint32_t f = PICK(in, flags);
    int32_t priority = PICK(in, priorities);
    void **out = OR_NULL(in, &st.streams[slot]);
    if (st.streams[slot] != NULL) return;
    CALL(rcb_stream_acquire(device, f, priority, out));
}

/* A stream to give back: one held from the cache (mostly), any stream argument, or the harness's
 * own, which the cache never gave out. */
static void *stream_to_release(input *in) {
    switch (pick(in, 6)) {
    case 4: return stream_arg(in);
    case 5: return gpu.stream; /* never acquired: refused, left untouched */
    default: return st.streams[pick(in, NSTREAM)];
    }
}

/* Checks a release's status against what was held, and forgets a released stream. */
static void released(void *s, rcb_status status) {
    if (s == gpu.stream && status != RCB_STATUS_INVALID_HANDLE) die("releasing a stream the cache never gave out returned %s", rcb_status_str(status));
    int i = in_table(st.streams, NSTREAM, s);
    if (i < 0) return;
    if (status == RCB_STATUS_INVALID_HANDLE || status == RCB_STATUS_NULL_ARGUMENT) die("releasing a held stream returned %s", rcb_status_str(status));
    st.streams[i] = NULL;
    remember_stale(s);
    /* Released twice, by either function: refused and left untouched. */
    if (CALL(rcb_stream_release_idle(s)) != RCB_STATUS_INVALID_HANDLE) die("a second release (idle) of a stream was not refused");
    if (CALL(rcb_stream_release(s)) != RCB_STATUS_INVALID_HANDLE) die("a second release of a stream was not refused");
}

static void op_stream_release(input *in) {
    void *s = stream_to_release(in);
    released(s, CALL(rcb_stream_release(s)));
}

/* Mostly what the patched XLA does: synchronize, then the idle release when that succeeded and
 * the querying one when not. Otherwise the idle release of a stream that may break its promise
 * (still running, or capturing): the cache keeps it as it is, and everything must stay safe. */
static void op_stream_release_idle(input *in) {
    void *s = stream_to_release(in);
    int idle = pick(in, 2) ? 1 : hipStreamSynchronize((hipStream_t)s) == hipSuccess;
    released(s, idle ? CALL(rcb_stream_release_idle(s)) : CALL(rcb_stream_release(s)));
}

static void op_stream_cache(input *in) {
    static const int32_t devices[] = {-1, 0, 1, 2, -2, INT32_MAX};
    int32_t device = PICK(in, devices);
    if (pick(in, 2)) {
        CALL(rcb_stream_cache_trim(device));
    } else {
        rcb_stream_stats stats, *sp = OR_NULL(in, &stats);
        stats.struct_size = struct_size_arg(in, sizeof stats);
        CALL(rcb_stream_cache_stats(device, sp));
    }
}

static void op_pool_new(input *in) {
    static const uint32_t slots[] = {2, 1, 3, 0, 4097, UINT32_MAX};
    static const uint32_t nbufs[] = {2, 1, 3, 0, 4097, UINT32_MAX};
    static const uint64_t sizes[] = {4096, 256, 64, 0, 1, 255, 65536, (2u << 20) + 1, 1ull << 46, (1ull << 46) + 1, UINT64_MAX};
    static const uint32_t npeers[] = {0, 1, 2, 3, 65};
    static uint64_t sizes_buf[3];
    static int32_t peers_buf[3];
    unsigned slot = pick(in, NPOOL);
    rcb_vmm_pool_config c;
    memset(&c, 0, sizeof c);
    c.device = PICK(in, DEVICES);
    c.backing = rarely(in, 8) ? u32(in) : pick(in, 2) ? RCB_VMM_BACKING_DEVICE : RCB_VMM_BACKING_VMM;
    c.num_slots = PICK(in, slots);
    c.num_buffers = PICK(in, nbufs);
    for (int i = 0; i < 3; i++) sizes_buf[i] = PICK(in, sizes);
    c.buffer_sizes = OR_NULL(in, sizes_buf);
    c.num_peers = PICK(in, npeers);
    for (int i = 0; i < 3; i++) peers_buf[i] = 1 - (int32_t)pick(in, 4);
    c.peers = c.num_peers == 0 && rarely(in, 2) ? NULL : peers_buf;
    c.timeout_ms = 1 + pick(in, 4);
    const rcb_vmm_pool_config *cp = OR_NULL(in, &c);
    rcb_vmm_pool **out = OR_NULL(in, &st.pool[slot]);
    c.struct_size = struct_size_arg(in, sizeof c);
    if (st.pool[slot] != NULL) return;
    CALL(rcb_vmm_pool_new(cp, out));
    st.nheld[slot] = 0;
}

static void op_pool_acquire(input *in) {
    rcb_vmm_pool *p = POOL_ARG(in);
    rcb_vmm_slot slot;
    rcb_vmm_slot *out = OR_NULL(in, &slot);
    slot.struct_size = struct_size_arg(in, sizeof slot);
    int i = in_table((void *const *)st.pool, NPOOL, p);
    if (CALL(rcb_vmm_pool_acquire(p, out)) != RCB_OK) return;
    check_written(slot.struct_size, sizeof slot, "an acquired slot");
    if (i < 0) return;
    if (slot.num_buffers == 0 || slot.buffers == NULL) die("an acquired slot without buffers");
    for (uint32_t b = 0; b < slot.num_buffers; b++) (void)*(volatile const uint64_t *)&slot.buffers[b];
    if (st.nheld[i] == NHELD) { /* hold at most four: release the oldest */
        CALL(rcb_vmm_pool_release(p, &st.held[i][0], gpu.stream));
        memmove(&st.held[i][0], &st.held[i][1], (NHELD - 1) * sizeof slot);
        st.nheld[i]--;
    }
    st.held[i][st.nheld[i]++] = slot;
}

/* A stream for a timeline write, never one that is capturing: the write would go into a graph
 * that may never run, and the pool could then never be freed (that is the caller's choice to
 * make, and the harness must free everything). */
static void *release_stream(input *in) {
    void *s = stream_arg(in);
    if (s == NULL || in_table(st.streams, NSTREAM, s) >= 0 || s == gpu.stream) {
        if (capturing((hipStream_t)s) || (s == NULL && capturing(gpu.stream))) return (void *)(uintptr_t)0x51;
    }
    return s;
}

static void op_pool_release(input *in) {
    rcb_vmm_pool *p = POOL_ARG(in);
    int i = in_table((void *const *)st.pool, NPOOL, p);
    rcb_vmm_slot forged;
    forged.iteration = u64(in);
    forged.index = u32(in);
    forged.num_buffers = 1;
    forged.buffers = NULL;
    const rcb_vmm_slot *slot = &forged;
    unsigned h = 0;
    if (i >= 0 && st.nheld[i] > 0 && !rarely(in, 4)) {
        h = pick(in, (unsigned)st.nheld[i]);
        slot = &st.held[i][h];
    }
    void *stream = release_stream(in);
    const rcb_vmm_slot *sp = OR_NULL(in, slot);
    forged.struct_size = struct_size_arg(in, sizeof forged);
    rcb_status s = CALL(rcb_vmm_pool_release(p, sp, stream));
    if (s != RCB_OK || i < 0) return;
    /* A forged slot that names a held one (same iteration and index) released that one. */
    for (h = 0; h < (unsigned)st.nheld[i]; h++) {
        if (st.held[i][h].iteration == slot->iteration && st.held[i][h].index == slot->index) break;
    }
    if (h == (unsigned)st.nheld[i]) die("a slot that was not held was released");
    memmove(&st.held[i][h], &st.held[i][h + 1], (size_t)(st.nheld[i] - (int)h - 1) * sizeof *slot);
    st.nheld[i]--;
}

static void op_pool_copy(input *in) {
    static rcb_vmm_copy copies[4];
    rcb_vmm_pool *p = POOL_ARG(in);
    int i = in_table((void *const *)st.pool, NPOOL, p);
    size_t n = rarely(in, 8) ? ((size_t)1 << 20) + 1 : pick(in, 5);
    for (size_t c = 0; c < n && c < 4; c++) {
        uint64_t inside = address(in);
        if (i >= 0 && st.nheld[i] > 0 && !rarely(in, 4)) {
            const rcb_vmm_slot *s = &st.held[i][pick(in, (unsigned)st.nheld[i])];
            inside = s->buffers[pick(in, s->num_buffers)] + 64 * (uint64_t)pick(in, 4);
        }
        uint64_t other = address(in);
        int into = pick(in, 2);
        copies[c].dst = into ? other : inside;
        copies[c].src = into ? inside : other;
        copies[c].bytes = rarely(in, 4) ? count_arg(in) : 64 * (uint64_t)pick(in, 5);
    }
    void *stream = stream_arg(in);
    CALL(rcb_vmm_pool_copy(p, stream, n == 0 && rarely(in, 2) ? NULL : copies, n));
}

static void op_pool_timeline(input *in) {
    rcb_vmm_pool *p = POOL_ARG(in);
    uint32_t slot = rarely(in, 8) ? u32(in) : pick(in, 4);
    uint64_t v;
    CALL(rcb_vmm_pool_timeline(p, slot, OR_NULL(in, &v)));
}

static void free_pool(rcb_vmm_pool *p) {
    rcb_status s = CALL(rcb_vmm_pool_free(p));
    if (p == NULL && s != RCB_OK) die("rcb_vmm_pool_free(NULL) returned %s", rcb_status_str(s));
    int i = in_table((void *const *)st.pool, NPOOL, p);
    if (i < 0 || s == RCB_STATUS_INVALID_STATE || s == RCB_STATUS_TIMEOUT) return; /* still live */
    if (s == RCB_STATUS_INVALID_HANDLE) die("freeing a live pool returned %s", rcb_status_str(s));
    if (CALL(rcb_vmm_pool_free(p)) != RCB_STATUS_INVALID_HANDLE) die("a second rcb_vmm_pool_free was not refused");
    st.pool[i] = NULL;
    st.nheld[i] = 0;
    remember_stale(p);
}

static void op_pool_free(input *in) { free_pool(POOL_ARG(in)); }

static void op_correlator_new(input *in) {
    static const uint32_t shards[] = {0, 1, 2, 3, 256, RCB_CORRELATOR_MAX_SHARDS, RCB_CORRELATOR_MAX_SHARDS + 1, UINT32_MAX};
    static const uint64_t limits[] = {0, 1, 3, 8, UINT64_MAX};
    unsigned slot = pick(in, NCOR);
    rcb_correlator_config c;
    c.shards = PICK(in, shards);
    c.max_activities = PICK(in, limits);
    c.max_api_events = PICK(in, limits);
    const rcb_correlator_config *cp = rarely(in, 8) ? NULL : &c;
    rcb_correlator **out = OR_NULL(in, &st.cor[slot]);
    c.struct_size = struct_size_arg(in, sizeof c);
    if (st.cor[slot] != NULL) return;
    CALL(rcb_correlator_new(cp, out));
}

static void free_correlator(rcb_correlator *c) {
    rcb_status s = free_checked(c, (void **)st.cor, NCOR, correlator_free, "rcb_correlator_free");
    (void)s;
}

static void op_correlator_free(input *in) { free_correlator(COR_ARG(in)); }

static void op_correlator_add(input *in) {
    rcb_correlator *c = COR_ARG(in);
    unsigned kind = pick(in, 4);
    unsigned n = pick(in, COUNT(events_buf) + 1);
    size_t count = rarely(in, 16) ? (size_t)u64(in) | (size_t)1 << 33 : n;
    switch (kind) {
    case 0:
        event_arg(in, &events_buf[0]);
        CALL(rcb_correlator_add_api_event(c, OR_NULL(in, &events_buf[0])));
        break;
    case 1:
        activity_arg(in, &activities_buf[0]);
        CALL(rcb_correlator_add_activity(c, OR_NULL(in, &activities_buf[0])));
        break;
    case 2:
        for (unsigned i = 0; i < n; i++) event_arg(in, &events_buf[i]);
        CALL(rcb_correlator_add_api_events(c, count == 0 && rarely(in, 2) ? NULL : events_buf, count));
        break;
    default:
        for (unsigned i = 0; i < n; i++) activity_arg(in, &activities_buf[i]);
        CALL(rcb_correlator_add_activities(c, count == 0 && rarely(in, 2) ? NULL : activities_buf, count));
        break;
    }
}

static void op_correlator_exchange(input *in) {
    rcb_correlator *c = COR_ARG(in);
    sink_ctx ctx = {rarely(in, 4) ? (int)pick(in, 4) : -1, c, 0};
    rcb_correlator_sink sink;
    sink.user_data = &ctx;
    sink.activities = rarely(in, 4) ? NULL : on_activities;
    sink.api_events = rarely(in, 4) ? NULL : on_api_events;
    sink.api_events_without_activity = rarely(in, 2) ? NULL : on_api_events;
    sink.dropped = rarely(in, 2) ? NULL : on_reports;
    sink.duplicates = rarely(in, 2) ? NULL : on_reports;
    const rcb_correlator_sink *sp = OR_NULL(in, &sink);
    rcb_correlator_summary summary;
    rcb_correlator_summary *out = rarely(in, 8) ? NULL : &summary;
    sink.struct_size = struct_size_arg(in, sizeof sink);
    summary.struct_size = struct_size_arg(in, sizeof summary);
    if (CALL(rcb_correlator_exchange(c, sp, out)) != RCB_OK || out == NULL) return;
    check_written(summary.struct_size, sizeof summary, "an exchange summary");
    if (summary.joined_main + summary.joined_auxiliary + summary.without_api != summary.activities)
        die("an exchange summary with %llu + %llu + %llu joined of %llu activities", (unsigned long long)summary.joined_main,
            (unsigned long long)summary.joined_auxiliary, (unsigned long long)summary.without_api,
            (unsigned long long)summary.activities);
}

static void op_correlator_misc(input *in) {
    rcb_correlator *c = COR_ARG(in);
    rcb_correlator_counters counters, *cp;
    switch (pick(in, 3)) {
    case 0:
        cp = OR_NULL(in, &counters);
        counters.struct_size = struct_size_arg(in, sizeof counters);
        CALL(rcb_correlator_stats(c, cp));
        break;
    case 1: CALL(rcb_correlator_clear(c)); break;
    default: CALL(rcb_correlator_trim(c)); break;
    }
}

static void op_update_child_graph(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    rcb_node node = node_arg(in);
    void *graph = graph_arg(in);
    CALL(rcb_cmdbuf_update_child_graph(cb, node, graph));
}

static void op_update_flattened_child(input *in) {
    rcb_cmdbuf *cb = CB_ARG(in);
    rcb_node group = node_arg(in);
    unsigned c = pick(in, 4); /* 0: a raw graph, 1: a command buffer, 2: both, 3: neither */
    rcb_cmdbuf *child = c == 1 || c == 2 ? CB_ARG(in) : NULL;
    void *graph = c == 0 || c == 2 ? graph_arg(in) : NULL;
    rcb_flatten_report report;
    memset(&report, 0xA5, sizeof report);
    rcb_flatten_report *rp = OR_NULL(in, &report);
    report.struct_size = struct_size_arg(in, sizeof report);
    if (CALL(rcb_cmdbuf_update_flattened_child(cb, group, child, graph, rp)) != RCB_OK || rp == NULL) return;
    check_written(report.struct_size, sizeof report, "a flatten report");
    if (memchr(report.reason, 0, sizeof report.reason) == NULL) die("the flatten report's reason is not NUL-terminated");
    if (report.flattened > 1) die("the flatten report says flattened = %u", report.flattened);
}

/* The executable graph's update budget: tiny ones make every update re-instantiate. */
static void op_budget(input *in) {
    static const uint64_t budgets[] = {1, 0, 4096, 64u << 20, UINT64_MAX};
    rcb_cmdbuf *cb = CB_ARG(in);
    if (pick(in, 3)) {
        uint64_t bytes = rarely(in, 8) ? u64(in) : PICK(in, budgets);
        CALL(rcb_cmdbuf_set_exec_update_budget(cb, bytes));
        return;
    }
    uint64_t budget = 0, spent = 0;
    uint64_t *b = OR_NULL(in, &budget), *sp = OR_NULL(in, &spent);
    CALL(rcb_cmdbuf_exec_update_budget(cb, b, sp));
}

/* Counters of a command buffer or of the process (NULL), with every struct size the caller may
 * state (the buffer always holds it), and fallback reason names. */
static void op_counters(input *in) {
    static const uint32_t sizes[] = {sizeof(rcb_counters), RCB_COUNTERS_V1_SIZE, RCB_COUNTERS_V1_SIZE - 1, 0, 8,
                                     sizeof(rcb_counters) + 64};
    rcb_cmdbuf *cb = pick(in, 3) ? CB_ARG(in) : NULL;
    unsigned which = pick(in, 3);
    if (which == 0) {
        unsigned char buf[sizeof(rcb_counters) + 64];
        memset(buf, 0x5A, sizeof buf);
        rcb_counters *c = (rcb_counters *)(void *)buf;
        uint32_t size = PICK(in, sizes);
        c->struct_size = size;
        if (CALL(rcb_counters_get(cb, OR_NULL(in, c))) != RCB_OK) return;
        if (c->struct_size != RCB_COUNTERS_V1_SIZE) die("rcb_counters_get wrote %u bytes of version 1 (struct_size %u)", c->struct_size, size);
        for (size_t i = size; i < sizeof buf; i++) {
            if (buf[i] != 0x5A) die("rcb_counters_get wrote byte %zu past struct_size %u", i, size);
        }
    } else if (which == 1) {
        CALL(rcb_counters_reset(cb));
    } else {
        const char *name = rcb_fallback_reason_name(rarely(in, 4) ? u32(in) : pick(in, RCB_FALLBACK_REASON_SLOTS + 2));
        if (name != NULL && name[0] == '\0') die("rcb_fallback_reason_name gave an empty name");
    }
}

/* The calls that cannot fail: any status number, truncated messages, the version. */
static void op_misc(input *in) {
    const char *text = rcb_status_str((rcb_status)u32(in));
    if (text == NULL || text[0] == '\0') die("rcb_status_str gave no text");
    const char *v = rcb_version();
    if (v == NULL || strchr(v, '.') == NULL) die("rcb_version gave '%s'", v ? v : "(null)");
    /* Fail a call to get a message, then read it back into a short buffer. */
    CALL(rcb_cmdbuf_finalize(NULL));
    size_t full = rcb_last_error_message(NULL, 0);
    char buf[8];
    size_t len = 1 + pick(in, sizeof buf);
    memset(buf, 'x', sizeof buf);
    if (rcb_last_error_message(buf, len) != full || memchr(buf, 0, len) == NULL) die("rcb_last_error_message(buf, %zu) broke its contract", len);
    rcb_runtime_info info, *ip = OR_NULL(in, &info);
    info.struct_size = struct_size_arg(in, sizeof info);
    CALL(rcb_runtime_load(ip));
}

/* The harness's own work: raw graphs (captured, or empty) and its stream. */
/* ROCm 6.4's hipBatchMemOpNodeParams and hipStreamBatchMemOpParams, and ROCm 6.x's
 * hipMemAllocNodeParams: none is in the 5.2 header. */
typedef struct {
    uint32_t operation, pad;
    uint64_t address, value, flags, alias, reserved;
} memop_t;
typedef struct {
    void *ctx;
    unsigned int count;
    memop_t *ops;
    unsigned int flags;
} batch_params_t;
typedef struct {
    unsigned char pool_props[88];
    const void *access;
    size_t access_count, bytesize;
    void *dptr;
} alloc_params_t;
/* Looked up by name: headers newer than 5.2 declare them with their own struct types. */
typedef hipError_t (*add_batch_fn)(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t, const batch_params_t *);
typedef hipError_t (*add_alloc_fn)(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t, alloc_params_t *);
static void *hip_symbol(const char *name) {
    void *f = dlsym(dlopen(NULL, RTLD_NOW), name);
    if (f == NULL) die("the software GPU does not export %s", name);
    return f;
}

static void count_host_call(void *user) { __atomic_add_fetch((int *)user, 1, __ATOMIC_SEQ_CST); }

/* A raw graph of event, host and memory-operation nodes around a fill, in an order the input
 * picks: fill, host, record(event a), wait(event b), write(address) chained, or all roots. */
static void raw_node_kinds(input *in, hipGraph_t g) {
    int chained = !rarely(in, 4);
    hipGraphNode_t prev = NULL, n = NULL;
    uint64_t dst = address(in), count = 16;
    uint32_t v = u8(in);
    void *params[] = {&dst, &v, &count};
    hipKernelNodeParams kp;
    memset(&kp, 0, sizeof kp);
    kp.func = (void *)gpu.fill;
    kp.gridDim.x = kp.gridDim.y = kp.gridDim.z = 1;
    kp.blockDim.x = 64, kp.blockDim.y = kp.blockDim.z = 1;
    kp.kernelParams = params;
#define LINK() (chained && prev != NULL ? 1 : 0)
    if (hipGraphAddKernelNode(&n, g, &prev, LINK(), &kp) == hipSuccess) prev = n;
    hipHostNodeParams hp = {count_host_call, &gpu.host_calls};
    if (hipGraphAddHostNode(&n, g, &prev, LINK(), &hp) == hipSuccess) prev = n;
    if (hipGraphAddEventRecordNode(&n, g, &prev, LINK(), gpu.events[pick(in, 2)]) == hipSuccess) prev = n;
    if (hipGraphAddEventWaitNode(&n, g, &prev, LINK(), gpu.events[pick(in, 2)]) == hipSuccess) prev = n;
    memop_t write = {rarely(in, 8) ? u8(in) : 5, 0, address(in), u64(in), 0, 0, 0};
    batch_params_t bp = {NULL, 1, &write, 0};
    if (((add_batch_fn)hip_symbol("hipGraphAddBatchMemOpNode"))(&n, g, &prev, LINK(), &bp) == hipSuccess) prev = n;
    if (rarely(in, 4)) {
        alloc_params_t ap;
        memset(&ap, 0, sizeof ap);
        ap.bytesize = 256;
        ((add_alloc_fn)hip_symbol("hipGraphAddMemAllocNode"))(&n, g, &prev, LINK(), &ap);
    }
#undef LINK
}

/* A capture across the harness's two streams: work on `stream`, a record it forks `side` with,
 * work on `side`, a record `stream` joins it back with (unless the input leaves it unjoined),
 * and a host function. */
static void capture_across_streams(input *in, hipGraph_t *out) {
    if (hipStreamBeginCapture(gpu.stream, hipStreamCaptureModeThreadLocal) != hipSuccess) return;
    uint64_t dst = address(in), n = 16;
    uint32_t v = u8(in);
    void *params[] = {&dst, &v, &n};
    hipModuleLaunchKernel(gpu.fill, 1, 1, 1, 64, 1, 1, 0, gpu.stream, params, NULL);
    hipEventRecord(gpu.events[0], gpu.stream);
    hipStreamWaitEvent(gpu.side, gpu.events[0], 0);
    hipModuleLaunchKernel(gpu.fill, 1, 1, 1, 64, 1, 1, 0, gpu.side, params, NULL);
    hipEventRecord(gpu.events[1], gpu.side);
    if (!rarely(in, 8)) hipStreamWaitEvent(gpu.stream, gpu.events[1], 0);
    hipLaunchHostFunc(gpu.stream, count_host_call, &gpu.host_calls);
    if (hipStreamEndCapture(gpu.stream, out) != hipSuccess) *out = NULL;
}

static void op_harness(input *in) {
    unsigned g = pick(in, NGRAPH);
    switch (pick(in, 8)) {
    case 0: /* a raw captured graph: a fill and a memset on the harness's stream */
        if (st.graphs[g] != NULL || capturing(gpu.stream)) break;
        if (hipStreamBeginCapture(gpu.stream, hipStreamCaptureModeThreadLocal) != hipSuccess) break;
        {
            uint64_t dst = address(in), n = 16;
            uint32_t v = u8(in);
            void *params[] = {&dst, &v, &n};
            hipModuleLaunchKernel(gpu.fill, 1, 1, 1, 64, 1, 1, 0, gpu.stream, params, NULL);
            hipMemsetD32Async((hipDeviceptr_t)(uintptr_t)address(in), v, 8, gpu.stream);
        }
        if (hipStreamEndCapture(gpu.stream, &st.graphs[g]) != hipSuccess) st.graphs[g] = NULL;
        break;
    case 1:
        if (st.graphs[g] == NULL) hipGraphCreate(&st.graphs[g], 0);
        break;
    case 2:
        if (st.graphs[g] != NULL) hipGraphDestroy(st.graphs[g]);
        st.graphs[g] = NULL;
        break;
    case 3: hipStreamSynchronize(gpu.stream); break; /* during a capture: invalidates it */
    case 5: /* a raw graph of event, host and memory-operation nodes */
        if (st.graphs[g] != NULL || hipGraphCreate(&st.graphs[g], 0) != hipSuccess) break;
        raw_node_kinds(in, st.graphs[g]);
        break;
    case 6: /* a capture joining a second stream through events, with a host function */
        if (st.graphs[g] != NULL || capturing(gpu.stream) || capturing(gpu.side)) break;
        capture_across_streams(in, &st.graphs[g]);
        break;
    case 7: /* the second stream waits on an event (a capture's, or one recorded outside) */
        hipStreamWaitEvent(gpu.side, gpu.events[pick(in, 2)], rarely(in, 8) ? 1 : 0);
        break;
    default: { /* a kernel straight on the stream, in a capture or not */
        uint64_t dst = address(in), n = count_arg(in);
        uint32_t v = u8(in);
        void *params[] = {&dst, &v, &n};
        hipModuleLaunchKernel(gpu.fill, 1, 1, 1, 64, 1, 1, 0, gpu.stream, params, NULL);
        break;
    }
    }
}

/* Checks that a second call on a consumed handle is refused as the header says. */
static void refused_again(rcb_status s, rcb_status want, const char *what) {
    if (s != want) die("%s returned %s, not %s", what, rcb_status_str(s), rcb_status_str(want));
}

/* One of two releases of a stream made at the same time from two threads. */
typedef struct {
    void *stream;
    int idle;
    pthread_barrier_t *start;
    rcb_status status;
} racing_release;

static void *release_racing(void *arg) {
    racing_release *r = arg;
    pthread_barrier_wait(r->start);
    r->status = r->idle ? CALL(rcb_stream_release_idle(r->stream)) : CALL(rcb_stream_release(r->stream));
    return NULL;
}

/* Releases `s` from this thread and another at once (by the functions chosen); returns the status
 * of the release that gave it back, after checking that the other was refused. */
static rcb_status release_at_once(void *s, int idle_first, int idle_second) {
    pthread_barrier_t start;
    if (pthread_barrier_init(&start, NULL, 2) != 0) die("harness: pthread_barrier_init failed");
    racing_release r[2] = {{s, idle_first, &start, RCB_OK}, {s, idle_second, &start, RCB_OK}};
    pthread_t other;
    if (pthread_create(&other, NULL, release_racing, &r[1]) != 0) die("harness: pthread_create failed");
    release_racing(&r[0]);
    pthread_join(other, NULL);
    pthread_barrier_destroy(&start);
    if ((r[0].status == RCB_STATUS_INVALID_HANDLE) + (r[1].status == RCB_STATUS_INVALID_HANDLE) != 1)
        die("two releases of a stream at once returned %s and %s, not one refused with RCB_STATUS_INVALID_HANDLE",
            rcb_status_str(r[0].status), rcb_status_str(r[1].status));
    return r[0].status == RCB_STATUS_INVALID_HANDLE ? r[1].status : r[0].status;
}

/* Releases a stream this op acquired, twice (by the two functions in a chosen order, one after
 * the other or from two threads at once): one gives it back (never INVALID_HANDLE), the other is
 * RCB_STATUS_INVALID_HANDLE. */
static void release_twice(input *in, void *s) {
    /* Bit 1 of the first byte races the two releases: older seeds hold 0 or 1 there. */
    uint8_t how = u8(in);
    int idle_first = how & 1, at_once = (how & 2) != 0, idle_second = pick(in, 2);
    if ((idle_first || idle_second) && hipStreamSynchronize((hipStream_t)s) != hipSuccess) idle_first = idle_second = 0;
    rcb_status first;
    if (at_once) {
        first = release_at_once(s, idle_first, idle_second);
    } else {
        first = idle_first ? CALL(rcb_stream_release_idle(s)) : CALL(rcb_stream_release(s));
        refused_again(idle_second ? CALL(rcb_stream_release_idle(s)) : CALL(rcb_stream_release(s)), RCB_STATUS_INVALID_HANDLE,
                      "a second release of a stream");
    }
    if (first == RCB_STATUS_INVALID_HANDLE || first == RCB_STATUS_NULL_ARGUMENT) die("releasing an acquired stream returned %s", rcb_status_str(first));
    remember_stale(s);
}

/* Double frees of every kind of object, each made here and used first, in one op (the ops
 * that free the input's own objects check a second free too: free_checked, free_pool,
 * released): a stream released twice (either function, either order; a stream reacquired after
 * a refused second release still works), a trace cache holding an entry, a primary command
 * buffer that flattened that entry's graph, launched, then re-instantiated by its budget while
 * the launch may run (an old executable and a kept graph waiting), a VMM pool whose slot was
 * released twice, and a correlator holding events. Each second free, and a call on the freed
 * handle, must return the header's status; the harness's live-object check at the end must
 * still hold. */
static void op_double_free(input *in) {
    void *s = NULL;
    uint32_t flags = pick(in, 2);
    if (CALL(rcb_stream_acquire(0, flags, 0, &s)) != RCB_OK) return;
    release_twice(in, s);
    /* The same key again: maybe the very stream, which the refused release left working. */
    void *work = NULL;
    if (CALL(rcb_stream_acquire(0, flags, 0, &work)) != RCB_OK) return;
    if (hipStreamQuery((hipStream_t)work) == hipErrorInvalidHandle) die("an acquired stream was destroyed (released twice before)");

    /* A trace cache with one entry, its graph flattened into a command buffer. */
    rcb_trace_cache *tc = NULL;
    void *entry = NULL;
    if (CALL(rcb_trace_cache_new(2, &tc)) == RCB_OK) {
        rcb_allocation table = {gpu.arena[0], ARENA_BYTES};
        trace_ctx t = {pick(in, 2), gpu.arena[0], tc};
        uint32_t outcome = 0;
        if (CALL(rcb_trace_cache_get_or_trace(tc, work, &table, 1, trace_fn, &t, &entry, &outcome)) != RCB_OK) entry = NULL;
    }
    rcb_cmdbuf *cb = NULL;
    if (CALL(rcb_cmdbuf_new(0, &cb)) == RCB_OK) {
        rcb_allocation table[2] = {{gpu.arena[0], ARENA_BYTES}, {gpu.arena[1], ARENA_BYTES}};
        CALL(rcb_cmdbuf_set_exec_update_budget(cb, rarely(in, 2) ? 0 : 1)); /* 1 byte: every update re-instantiates */
        CALL(rcb_cmdbuf_set_allocations(cb, table, 2));
        uint64_t dst = gpu.arena[0], n = 16;
        uint32_t v = 9;
        rcb_kernel_arg fill[3] = {{&dst, 8, RCB_ARG_DEVICE_PTR}, {&v, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
        rcb_kernel_launch l = {sizeof(rcb_kernel_launch), gpu.fill, {1, 1, 1}, {64, 1, 1}, 0, fill, 3};
        rcb_node node = 0, group = 0;
        CALL(rcb_cmdbuf_add_kernel(cb, NULL, 0, &l, &node));
        rcb_flatten_report report;
        report.struct_size = sizeof report;
        if (entry != NULL && !rarely(in, 4)) CALL(rcb_cmdbuf_add_flattened_child(cb, NULL, 0, NULL, entry, &group, &report));
        if (CALL(rcb_cmdbuf_finalize(cb)) == RCB_OK && CALL(rcb_cmdbuf_launch(cb, work)) == RCB_OK) {
            rcb_allocation_move move = {0, gpu.arena[2]};
            rcb_update_report r;
            r.struct_size = sizeof r;
            CALL(rcb_cmdbuf_move_allocations(cb, &move, 1, &r));
        }
    }
    /* The cache first: the command buffer keeps what its flattened nodes may read. */
    if (tc != NULL) {
        rcb_status first = CALL(rcb_trace_cache_free(tc));
        if (first == RCB_STATUS_INVALID_HANDLE || first == RCB_STATUS_INVALID_STATE) die("freeing a trace cache returned %s", rcb_status_str(first));
        refused_again(CALL(rcb_trace_cache_free(tc)), RCB_STATUS_INVALID_HANDLE, "a second rcb_trace_cache_free");
        void *g = NULL;
        uint32_t outcome = 0;
        refused_again(CALL(rcb_trace_cache_get_or_trace(tc, work, NULL, 0, trace_fn, NULL, &g, &outcome)), RCB_STATUS_INVALID_HANDLE,
                      "get_or_trace on a freed trace cache");
        remember_stale(tc);
    }
    if (cb != NULL) {
        /* The launch's stream synchronized, the promise lets the free destroy at once what the
         * launch used, even a failed one (which may have queued part of its work). */
        hipStreamSynchronize((hipStream_t)work);
        CALL(rcb_cmdbuf_launches_done(cb));
        rcb_status first = CALL(rcb_cmdbuf_free(cb));
        if (first == RCB_STATUS_INVALID_HANDLE) die("freeing a command buffer returned %s", rcb_status_str(first));
        refused_again(CALL(rcb_cmdbuf_free(cb)), RCB_STATUS_INVALID_HANDLE, "a second rcb_cmdbuf_free");
        refused_again(CALL(rcb_cmdbuf_launch(cb, work)), RCB_STATUS_INVALID_HANDLE, "a launch of a freed command buffer");
        remember_stale(cb);
    }

    /* A pool whose slot is released twice, then freed twice. */
    uint64_t size = 4096;
    rcb_vmm_pool_config c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.backing = pick(in, 2) ? RCB_VMM_BACKING_DEVICE : RCB_VMM_BACKING_VMM;
    c.num_slots = 2;
    c.num_buffers = 1;
    c.buffer_sizes = &size;
    c.timeout_ms = 5;
    rcb_vmm_pool *pool = NULL;
    if (CALL(rcb_vmm_pool_new(&c, &pool)) == RCB_OK) {
        rcb_vmm_slot slot;
        slot.struct_size = sizeof slot;
        if (CALL(rcb_vmm_pool_acquire(pool, &slot)) == RCB_OK) {
            if (CALL(rcb_vmm_pool_release(pool, &slot, work)) != RCB_OK) die("releasing an acquired slot failed");
            refused_again(CALL(rcb_vmm_pool_release(pool, &slot, work)), RCB_STATUS_INVALID_STATE, "a second release of a slot");
        }
        hipStreamSynchronize((hipStream_t)work);
        rcb_status first = CALL(rcb_vmm_pool_free(pool));
        if (first == RCB_STATUS_INVALID_HANDLE || first == RCB_STATUS_INVALID_STATE || first == RCB_STATUS_TIMEOUT)
            die("freeing a pool with every slot released and its stream synchronized returned %s", rcb_status_str(first));
        refused_again(CALL(rcb_vmm_pool_free(pool)), RCB_STATUS_INVALID_HANDLE, "a second rcb_vmm_pool_free");
        remember_stale(pool);
    }

    /* A correlator holding events. */
    rcb_correlator *cor = NULL;
    rcb_correlator_config cc;
    memset(&cc, 0, sizeof cc); /* the defaults */
    cc.struct_size = sizeof cc;
    if (CALL(rcb_correlator_new(&cc, &cor)) == RCB_OK) {
        rcb_api_event e;
        event_arg(in, &e);
        CALL(rcb_correlator_add_api_event(cor, &e));
        if (CALL(rcb_correlator_free(cor)) != RCB_OK) die("freeing a correlator failed");
        refused_again(CALL(rcb_correlator_free(cor)), RCB_STATUS_INVALID_HANDLE, "a second rcb_correlator_free");
        refused_again(CALL(rcb_correlator_add_api_event(cor, &e)), RCB_STATUS_INVALID_HANDLE, "an event added to a freed correlator");
        remember_stale(cor);
    }
    release_twice(in, work);
}

/* ---- calls at a thread's exit ---- */

static pthread_key_t exit_key;
static void run_program(input *in, size_t max_ops);

enum { EXIT_OPS = 4 };

/* The key's destructor: runs after the thread's thread-locals were destroyed. */
static void at_thread_exit(void *program) {
    exit_time = 1;
    run_program(program, EXIT_OPS);
    exit_time = 0;
}

static void *exiting_thread(void *program) {
    /* The thread-locals with destructors first, as tests/c/exit_calls.cpp does: the library's
     * last error (a failed call) and cached correlator (any correlator call), and the software
     * GPU's (its runtime's thread spawning, reached by a stream's creation). One first made in
     * the key destructor registers its destructor after the thread's have run, and glibc never
     * runs it: LeakSanitizer reports the registration (and what the value holds) as leaked. The
     * check here is that calls after the destruction behave. */
    refused_again(CALL(rcb_stream_release(NULL)), RCB_STATUS_NULL_ARGUMENT, "rcb_stream_release(NULL)");
    rcb_api_event e;
    memset(&e, 0, sizeof e);
    refused_again(CALL(rcb_correlator_add_api_event(NULL, &e)), RCB_STATUS_NULL_ARGUMENT, "rcb_correlator_add_api_event(NULL)");
    CALL(rcb_cmdbuf_free(NULL));
    hipStream_t s;
    hip_or_die(hipStreamCreate(&s), "hipStreamCreate");
    hip_or_die(hipStreamDestroy(s), "hipStreamDestroy");
    if (pthread_setspecific(exit_key, program) != 0) die("harness: pthread_setspecific failed");
    return NULL;
}

/* Runs the op's bytes as up to EXIT_OPS ops in a pthread key destructor of a thread that exits. */
static void op_thread_exit(input *in) {
    pthread_t t;
    if (pthread_create(&t, NULL, exiting_thread, in) != 0) die("harness: pthread_create failed");
    pthread_join(t, NULL);
    current_op = "thread_exit";
}

typedef void (*op_fn)(input *);

static const struct {
    const char *name;
    op_fn fn;
} OPS[] = {
    {"cmdbuf_new", op_cmdbuf_new},                 /* 0 */
    {"cmdbuf_free", op_cmdbuf_free},               /* 1 */
    {"set_allocations", op_set_allocations},       /* 2 */
    {"add_kernel", op_add_kernel},                 /* 3 */
    {"add_kernel_params", op_add_kernel_params},   /* 4 */
    {"add_memcpy", op_add_memcpy},                 /* 5 */
    {"add_memset", op_add_memset},                 /* 6 */
    {"add_empty", op_add_empty},                   /* 7 */
    {"add_child", op_add_child},                   /* 8 */
    {"add_child_graph", op_add_child_graph},       /* 9 */
    {"add_flattened_child", op_add_flattened_child}, /* 10 */
    {"update_kernel", op_update_kernel},           /* 11 */
    {"update_kernel_params", op_update_kernel_params}, /* 12 */
    {"update_memcpy", op_update_memcpy},           /* 13 */
    {"update_memset", op_update_memset},           /* 14 */
    {"update_child", op_update_child},             /* 15 */
    {"capture", op_capture},                       /* 16 */
    {"capture_end", op_capture_end},               /* 17 */
    {"finalize", op_finalize},                     /* 18 */
    {"begin_update", op_begin_update},             /* 19 */
    {"launch", op_launch},                         /* 20 */
    {"queries", op_queries},                       /* 21 */
    {"update_allocations", op_update_allocations}, /* 22 */
    {"move_allocations", op_move_allocations},     /* 23 */
    {"trace_cache_new", op_trace_cache_new},       /* 24 */
    {"trace_cache_free", op_trace_cache_free},     /* 25 */
    {"get_or_trace", op_get_or_trace},             /* 26 */
    {"stream_acquire", op_stream_acquire},         /* 27 */
    {"stream_release", op_stream_release},         /* 28 */
    {"stream_cache", op_stream_cache},             /* 29 */
    {"pool_new", op_pool_new},                     /* 30 */
    {"pool_acquire", op_pool_acquire},             /* 31 */
    {"pool_release", op_pool_release},             /* 32 */
    {"pool_copy", op_pool_copy},                   /* 33 */
    {"pool_timeline", op_pool_timeline},           /* 34 */
    {"pool_free", op_pool_free},                   /* 35 */
    {"correlator_new", op_correlator_new},         /* 36 */
    {"correlator_free", op_correlator_free},       /* 37 */
    {"correlator_add", op_correlator_add},         /* 38 */
    {"correlator_exchange", op_correlator_exchange}, /* 39 */
    {"correlator_misc", op_correlator_misc},       /* 40 */
    {"misc", op_misc},                             /* 41 */
    {"harness", op_harness},                       /* 42 */
    {"update_child_graph", op_update_child_graph}, /* 43 */
    {"update_flattened_child", op_update_flattened_child}, /* 44 */
    {"budget", op_budget},                         /* 45 */
    {"counters", op_counters},                     /* 46 */
    {"stream_release_idle", op_stream_release_idle}, /* 47 */
    {"relocation_oracle", op_relocation_oracle},   /* 48 */
    {"double_free", op_double_free},               /* 49 */
    {"thread_exit", op_thread_exit},               /* 50 */
};

/* Waits for every stream of every device (a stream the input released may still run work). */
static void settle(void) {
    hipStreamSynchronize(gpu.stream);
    hipStreamSynchronize(gpu.side);
    for (int i = 0; i < NSTREAM; i++) {
        if (st.streams[i] != NULL) hipStreamSynchronize((hipStream_t)st.streams[i]);
    }
    int devices = 0;
    hipGetDeviceCount(&devices);
    for (int d = 0; d < devices; d++) {
        hipSetDevice(d);
        hipDeviceSynchronize();
    }
    hipSetDevice(0);
}

/* Whether the GPU holds what it held before the input. */
static int live_as_before(void) {
    for (int k = 0; k < NKINDS; k++) {
        if (hipsimLiveCount(LIVE_KINDS[k]) != gpu.live[k]) return 0;
    }
    return 1;
}

/* Frees everything the input left, then checks that nothing is left on the GPU. */
static void cleanup(void) {
    current_op = "cleanup";
    for (int i = 0; i < NCB; i++) {
        if (st.cb[i] != NULL) free_cmdbuf(st.cb[i]);
    }
    if (capturing(gpu.stream)) {
        /* Only the harness's own raw capture may be left: end it (which ends `side`'s too). */
        hipGraph_t g = NULL;
        if (hipStreamEndCapture(gpu.stream, &g) == hipSuccess && g != NULL) hipGraphDestroy(g);
    }
    if (capturing(gpu.stream))
        die("the harness's stream is still capturing after every command buffer was freed and its own capture ended (a capture "
            "left by a thread that exited, or not ended by a free)");
    if (capturing(gpu.side)) die("the second stream is still capturing after its capture ended");
    for (int i = 0; i < NTC; i++) {
        if (st.tc[i] != NULL) free_trace_cache(st.tc[i]);
    }
    for (int i = 0; i < NSTREAM; i++) {
        if (st.streams[i] != NULL && capturing(st.streams[i])) die("a held stream is still capturing after every command buffer was freed");
    }
    settle(); /* also clears a sticky error the input caused */
    for (int i = 0; i < NPOOL; i++) {
        if (st.pool[i] == NULL) continue;
        for (int h = 0; h < st.nheld[i]; h++) {
            rcb_status s = CALL(rcb_vmm_pool_release(st.pool[i], &st.held[i][h], gpu.stream));
            if (s != RCB_OK) die("releasing a held slot at the end returned %s", rcb_status_str(s));
        }
        st.nheld[i] = 0;
        /* Every timeline write the input enqueued, on any stream of any device, has run: the free
         * must not wait, whatever the pool's timeout. */
        settle();
        free_pool(st.pool[i]);
        if (st.pool[i] != NULL) die("a pool with every slot released could not be freed");
    }
    for (int i = 0; i < NSTREAM; i++) {
        if (st.streams[i] == NULL) continue;
        if (CALL(rcb_stream_release(st.streams[i])) == RCB_STATUS_INVALID_HANDLE) die("a held stream was not held");
        st.streams[i] = NULL;
    }
    CALL(rcb_stream_cache_trim(-1));
    for (int i = 0; i < NCOR; i++) {
        if (st.cor[i] != NULL) free_correlator(st.cor[i]);
    }
    for (int i = 0; i < NGRAPH; i++) {
        if (st.graphs[i] != NULL) hipGraphDestroy(st.graphs[i]);
    }
    settle();
    /* Command buffers freed while their launches ran left what those use to later library calls
     * (see rcb_cmdbuf_free); every launch has finished now, so a few calls destroy all of it. */
    for (int round = 0; round < 256 && !live_as_before(); round++) {
        rcb_cmdbuf *cb = NULL;
        if (rcb_cmdbuf_new(0, &cb) == RCB_OK) rcb_cmdbuf_free(cb);
    }
    for (int k = 0; k < NKINDS; k++) {
        uint64_t now = hipsimLiveCount(LIVE_KINDS[k]);
        if (now != gpu.live[k])
            die("%llu live %s object(s) after everything was freed, %llu before the input", (unsigned long long)now,
                LIVE_KINDS[k], (unsigned long long)gpu.live[k]);
    }
    memset(&st, 0, sizeof st);
}

static void hip_or_die(hipError_t e, const char *what) {
    if (e != hipSuccess) die("harness set-up: %s returned %d", what, (int)e);
}

/* Runs at process exit (libFuzzer ends with exit()), after the main thread's thread-locals were
 * destroyed: the first EXIT_OPS ops of the last input again, then frees everything and checks the
 * software GPU's live objects, as after an input. */
static void exit_calls(void) {
    in_atexit = 1;
    exit_time = 1;
    input in = {last_input, last_input_len};
    run_program(&in, EXIT_OPS);
    cleanup();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    trace = getenv("FUZZ_TRACE") != NULL;
    current_op = "set-up";
    /* Short waits: a pool slot that is never released times out in milliseconds, not seconds. */
    setenv("RCB_VMM_POOL_TIMEOUT_MS", "5", 0);
    rcb_runtime_info info;
    info.struct_size = sizeof info;
    if (rcb_runtime_load(&info) != RCB_OK) die("the runtime did not load (set RCB_BACKEND=hip and RCB_HIP_LIBRARY)");
    hip_or_die(hipModuleLoadData(&gpu.module, "hipsim"), "hipModuleLoadData");
    hip_or_die(hipModuleGetFunction(&gpu.fill, gpu.module, "rcb_test_fill_u32"), "fill");
    hip_or_die(hipModuleGetFunction(&gpu.axpy, gpu.module, "rcb_test_axpy_f32"), "axpy");
    hip_or_die(hipModuleGetFunction(&gpu.add, gpu.module, "rcb_test_add_f32"), "add");
    hip_or_die(hipModuleGetFunction(&gpu.copy, gpu.module, "rcb_test_copy_u8"), "copy");
    hip_or_die(hipStreamCreate(&gpu.stream), "hipStreamCreate");
    hip_or_die(hipStreamCreateWithFlags(&gpu.side, hipStreamNonBlocking), "hipStreamCreateWithFlags");
    for (int i = 0; i < 2; i++) hip_or_die(hipEventCreateWithFlags(&gpu.events[i], hipEventDisableTiming), "hipEventCreateWithFlags");
    for (int i = 0; i < NARENA; i++) {
        void *p;
        hip_or_die(hipMalloc(&p, ARENA_BYTES), "hipMalloc");
        gpu.arena[i] = (uint64_t)(uintptr_t)p;
    }
    for (int i = 0; i < ORACLE_BUFFERS; i++) {
        void *p;
        hip_or_die(hipMalloc(&p, 4 * ORACLE_FLOATS), "hipMalloc");
        gpu.oracle[i] = (uint64_t)(uintptr_t)p;
    }
    hip_or_die(hipStreamCreate(&gpu.oracle_stream), "hipStreamCreate");
    /* The process's first command buffer settles the update budget, whose probe keeps a 128-byte
     * buffer for the process: settled before the live objects every input must give back. */
    rcb_cmdbuf *first = NULL;
    if (rcb_cmdbuf_new(0, &first) != RCB_OK || rcb_cmdbuf_free(first) != RCB_OK) die("harness: first command buffer");
    for (int k = 0; k < NKINDS; k++) gpu.live[k] = hipsimLiveCount(LIVE_KINDS[k]);
    if (pthread_key_create(&exit_key, at_thread_exit) != 0) die("harness: pthread_key_create failed");
    if (atexit(exit_calls) != 0) die("harness: atexit failed");
    return 0;
}

/* Runs the ops of `in`, at most `max_ops` of them. At exit time a thread_exit op is skipped. */
static void run_program(input *in, size_t max_ops) {
    for (size_t done = 0; in->n > 0 && done < max_ops; done++) {
        unsigned op = u8(in) % COUNT(OPS);
        size_t len = u8(in);
        input args = {in->p, len < in->n ? len : in->n};
        in->p += args.n;
        in->n -= args.n;
        if (exit_time && OPS[op].fn == op_thread_exit) continue;
        current_op = OPS[op].name;
        if (trace) fprintf(stderr, "%sop %s (%zu bytes)\n", exit_time ? "at exit: " : "", current_op, args.n);
        OPS[op].fn(&args);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    last_input_len = size < sizeof last_input ? size : sizeof last_input;
    if (last_input_len > 0) memcpy(last_input, data, last_input_len);
    input in = {data, size};
    run_program(&in, SIZE_MAX);
    cleanup();
    return 0;
}
