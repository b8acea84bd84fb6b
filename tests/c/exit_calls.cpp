// Calls into the library when the calling thread's thread-local storage is already destroyed:
// glibc's exit() destroys the main thread's thread-locals before it runs atexit handlers and C++
// static destructors, and a thread's exit destroys them before its pthread key destructors. Each
// of the three runs the same calls as main did first (so the library's thread-locals had been
// created): statuses must be right, a last-error message must be the right one or empty (it may
// be dropped, never wrong), and nothing may abort. Needs the software GPU (the library's runtime
// and the program's HIP calls); run as `exit_calls all` with RCB_BACKEND=hip and
// RCB_HIP_LIBRARY set (run.sh). Exits 0 and prints "exit_calls: ok" from the last phase (the
// static destructor) when every check of every phase held; a failing phase exits 1 at once. Each
// phase also frees a command buffer whose launch is still held, so the process exits with one on
// the library's list of freed command buffers (see rcb_cmdbuf_free): nothing may crash then.
#include <hip/hip_runtime_api.h>
#include <pthread.h>
#include <unistd.h>

#include "check.h"

// check.h's RCB and HIP stop with exit(), which an atexit handler or static destructor must not
// call; these stop with _exit().
#define NEED(call)                                                                                                     \
    do {                                                                                                               \
        rcb_status s_ = (call);                                                                                        \
        if (s_ != RCB_OK) {                                                                                            \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, rcb_status_str(s_), last_error()); \
            _exit(1);                                                                                                  \
        }                                                                                                              \
    } while (0)
#define NEED_HIP(call)                                                                         \
    do {                                                                                       \
        hipError_t e_ = (call);                                                                \
        if (e_ != hipSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, (int)e_); \
            _exit(1);                                                                          \
        }                                                                                      \
    } while (0)

// The phases in the order they must run: main, the thread's key destructor, atexit, the static
// destructor.
static int phases_done = 0;

// A failing call's message: empty (dropped) or naming `needle`.
static void expect_fail(rcb_status got, rcb_status want, const char *needle, const char *what) {
    CHECK(got == want, "%s returned %s, expected %s", what, rcb_status_str(got), rcb_status_str(want));
    size_t n = rcb_last_error_message(NULL, 0);
    CHECK(n == 0 || strstr(last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, last_error(), needle);
}

static int32_t count_activities(void *user, uint32_t, uint64_t, const rcb_correlated_activity *r, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (r[i].api != NULL && r[i].api->correlation_id == r[i].activity->correlation_id) ++*static_cast<uint64_t *>(user);
    }
    return 0;
}

struct tracing {
    rcb_trace_cache *tc;
    rcb_status nested_free; // what rcb_trace_cache_free returned from inside the trace_fn
    void *buffer;
};

static int32_t trace_memset(void *user, void *stream) {
    tracing *t = static_cast<tracing *>(user);
    // The library must see that this thread runs the cache's trace_fn, thread-locals or not.
    t->nested_free = rcb_trace_cache_free(t->tc);
    return hipMemsetAsync(t->buffer, 7, 64, static_cast<hipStream_t>(stream)) == hipSuccess ? 0 : 1;
}

static void calls(const char *phase) {
    int before = failures;
    CHECK(rcb_cmdbuf_free(NULL) == RCB_OK && rcb_trace_cache_free(NULL) == RCB_OK && rcb_vmm_pool_free(NULL) == RCB_OK &&
              rcb_correlator_free(NULL) == RCB_OK,
          "%s: a free of NULL failed", phase);
    CHECK(rcb_last_error_message(NULL, 0) == 0, "%s: success left a message: %s", phase, last_error());
    expect_fail(rcb_stream_release(NULL), RCB_STATUS_NULL_ARGUMENT, "`stream`", "rcb_stream_release(NULL)");
    CHECK(strncmp(rcb_status_str(RCB_STATUS_INVALID_HANDLE), "RCB_STATUS_INVALID_HANDLE", 25) == 0, "%s: status text", phase);
    CHECK(rcb_version()[0] != '\0', "%s: version", phase);

    // The correlator: its per-thread cache of the last handle is a thread-local too.
    rcb_correlator_config config;
    memset(&config, 0, sizeof config);
    config.struct_size = sizeof config;
    rcb_correlator *c = NULL;
    NEED(rcb_correlator_new(&config, &c));
    rcb_api_event api;
    memset(&api, 0, sizeof api);
    api.correlation_id = 42;
    rcb_activity activity;
    memset(&activity, 0, sizeof activity);
    activity.correlation_id = 42;
    NEED(rcb_correlator_add_api_event(c, &api));
    NEED(rcb_correlator_add_activity(c, &activity));
    uint64_t joined = 0;
    rcb_correlator_sink sink;
    memset(&sink, 0, sizeof sink);
    sink.struct_size = sizeof sink;
    sink.user_data = &joined;
    sink.activities = count_activities;
    rcb_correlator_summary summary;
    SIZED(summary);
    NEED(rcb_correlator_exchange(c, &sink, &summary));
    CHECK(joined == 1 && summary.joined_main == 1, "%s: %llu activities joined", phase, (unsigned long long)joined);
    NEED(rcb_correlator_free(c));
    expect_fail(rcb_correlator_clear(c), RCB_STATUS_INVALID_HANDLE, "not live", "rcb_correlator_clear(freed)");

    // The stream cache: a stream acquired, used, given back; a second release refused.
    void *s = NULL;
    NEED(rcb_stream_acquire(0, hipStreamNonBlocking, 0, &s));
    CHECK(hipStreamQuery(static_cast<hipStream_t>(s)) == hipSuccess, "%s: acquired stream not idle", phase);

    // The trace cache, whose re-entrancy guard is a thread-local: a free from inside its own
    // trace_fn is refused, the capture goes on.
    tracing t = {NULL, RCB_OK, NULL};
    NEED_HIP(hipMalloc(&t.buffer, 64));
    NEED(rcb_trace_cache_new(2, &t.tc));
    void *graph = NULL;
    uint32_t outcome = 99;
    NEED(rcb_trace_cache_get_or_trace(t.tc, s, NULL, 0, trace_memset, &t, &graph, &outcome));
    CHECK(t.nested_free == RCB_STATUS_INVALID_STATE, "%s: free from inside trace_fn returned %s", phase,
          rcb_status_str(t.nested_free));
    CHECK(outcome == RCB_TRACE_TRACED && graph != NULL, "%s: outcome %u", phase, outcome);
    NEED(rcb_trace_cache_free(t.tc));

    // A command buffer built, launched on the cached stream and freed.
    rcb_cmdbuf *cb = NULL;
    NEED(rcb_cmdbuf_new(0, &cb));
    rcb_node node;
    NEED(rcb_cmdbuf_add_empty(cb, NULL, 0, &node));
    NEED(rcb_cmdbuf_finalize(cb));
    NEED(rcb_cmdbuf_launch(cb, s));
    NEED_HIP(hipStreamSynchronize(static_cast<hipStream_t>(s)));
    NEED(rcb_cmdbuf_free(cb));

    // A command buffer freed while its launch is held behind a device word: the free destroys
    // nothing the launch runs, and leaves it to later calls (the next phase's, or none: the last
    // phase exits with it still on the library's list, which is leaked then).
    void *word = NULL;
    NEED_HIP(hipMalloc(&word, 8));
    NEED_HIP(hipMemset(word, 0, 8));
    NEED(rcb_cmdbuf_new(0, &cb));
    NEED(rcb_cmdbuf_add_empty(cb, NULL, 0, &node));
    NEED(rcb_cmdbuf_finalize(cb));
    NEED_HIP(hipStreamWaitValue64(static_cast<hipStream_t>(s), word, 1, hipStreamWaitValueGte, ~0ull));
    NEED(rcb_cmdbuf_launch(cb, s));
    NEED(rcb_cmdbuf_free(cb));
    hipStream_t opener = NULL;
    NEED_HIP(hipStreamCreateWithFlags(&opener, hipStreamNonBlocking));
    NEED_HIP(hipStreamWriteValue64(opener, word, 1, 0));
    NEED_HIP(hipStreamSynchronize(opener));
    NEED_HIP(hipStreamDestroy(opener));
    NEED_HIP(hipStreamSynchronize(static_cast<hipStream_t>(s)));
    NEED_HIP(hipFree(word));
    NEED_HIP(hipFree(t.buffer));

    NEED(rcb_stream_release(s));
    expect_fail(rcb_stream_release(s), RCB_STATUS_INVALID_HANDLE, "already released", "a second rcb_stream_release");

    phases_done++;
    if (failures != before) {
        fprintf(stderr, "exit_calls: %s: %d check(s) failed\n", phase, failures - before);
        _exit(1);
    }
}

static pthread_key_t key;

static void key_destructor(void *) { calls("thread-exit key destructor"); }

static void *thread_body(void *) {
    calls("thread");
    // Non-NULL, so that the destructor runs at the thread's exit, after its thread-locals.
    pthread_setspecific(key, &key);
    return NULL;
}

static void at_exit() {
    CHECK(phases_done == 3, "atexit ran after %d phases, expected 3", phases_done);
    calls("atexit");
}

struct static_object {
    ~static_object() {
        CHECK(phases_done == 4, "the static destructor ran after %d phases, expected 4", phases_done);
        calls("C++ static destructor");
        printf("exit_calls: %s\n", failures ? "FAIL" : "ok");
        if (failures) _exit(1);
    }
};

static static_object last_phase;

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "all") != 0) {
        fprintf(stderr, "usage: exit_calls all\n");
        return 2;
    }
    calls("main");
    pthread_key_create(&key, key_destructor);
    pthread_t thread;
    if (pthread_create(&thread, NULL, thread_body, NULL) != 0 || pthread_join(thread, NULL) != 0) {
        fprintf(stderr, "exit_calls: no thread\n");
        return 1;
    }
    atexit(at_exit);
    return 0;
}
