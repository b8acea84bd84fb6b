/* The profiler correlator through the C header, as XLA's collector would drive it: a
 * hipGraphLaunch (one API event, 1000 kernels under one correlation id), an id past 2^32 beside
 * the id it collides with when narrowed, an id whose API event was lost, a duplicate API event,
 * an auxiliary-only id; then a second (empty) flush, a failing callback, clearing and trimming,
 * and the error statuses. No GPU runtime is loaded. Compiled as C11, plain and with ASan+UBSan
 * (run.sh); correlator.cpp does the same through the C++ wrapper. Exits 0 when every check
 * holds, 1 otherwise. */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KERNELS 1000
#define HIGH_ID (UINT64_C(1) + (UINT64_C(1) << 32))

/* Per-device vectors, as RocmTraceCollectorImpl::Flush builds them. */
typedef struct {
    rcb_activity activity;
    uint64_t api_id; /* 0: no API event */
    uint32_t api_flags;
} record;

typedef struct {
    record *per_device[2];
    size_t count[2], reserved[2];
    uint64_t api_events, api_events_without_activity, dropped_ids, dropped_activities, duplicate_ids, calls;
    int fail; /* return this from the activities callback */
} collected;

static int32_t on_activities(void *user, uint32_t device, uint64_t device_records, const rcb_correlated_activity *r, size_t n) {
    collected *c = (collected *)user;
    c->calls++;
    if (c->fail != 0) return c->fail;
    CHECK(device < 2, "device %u", device);
    CHECK(n >= 1 && n <= RCB_CORRELATOR_BATCH, "batch of %zu", n);
    if (device >= 2) return 1;
    if (c->reserved[device] == 0) {
        /* The first batch of a device tells how many records it has: one allocation. */
        c->per_device[device] = (record *)malloc(sizeof(record) * (size_t)device_records);
        c->reserved[device] = (size_t)device_records;
    }
    CHECK(c->count[device] + n <= c->reserved[device], "more records than announced");
    for (size_t i = 0; i < n && c->count[device] < c->reserved[device]; i++) {
        record *out = &c->per_device[device][c->count[device]++];
        out->activity = *r[i].activity;
        CHECK(r[i].activity->device_id == device, "a record of device %u in a batch of %u", r[i].activity->device_id, device);
        out->api_id = r[i].api != NULL ? r[i].api->correlation_id : 0;
        out->api_flags = r[i].api != NULL ? r[i].api->flags : 0;
    }
    return 0;
}

static int32_t on_api_events(void *user, uint32_t device, uint64_t device_records, const rcb_correlated_api_event *r, size_t n) {
    collected *c = (collected *)user;
    (void)device_records;
    for (size_t i = 0; i < n; i++) {
        CHECK(r[i].first_activity != NULL && r[i].first_activity->device_id == device, "first activity of %llu",
              (unsigned long long)r[i].api->correlation_id);
        if (r[i].api->correlation_id == 7) CHECK(r[i].activities == KERNELS, "graph launch: %llu activities", (unsigned long long)r[i].activities);
    }
    c->api_events += n;
    return 0;
}

static int32_t on_without_activity(void *user, uint32_t device, uint64_t device_records, const rcb_correlated_api_event *r, size_t n) {
    collected *c = (collected *)user;
    (void)device_records;
    CHECK(device == RCB_DEVICE_NONE, "device %u", device);
    for (size_t i = 0; i < n; i++) CHECK(r[i].first_activity == NULL && r[i].activities == 0, "an activity");
    c->api_events_without_activity += n;
    return 0;
}

static int32_t on_dropped(void *user, const rcb_correlation_report *r, size_t n) {
    collected *c = (collected *)user;
    for (size_t i = 0; i < n; i++) {
        CHECK(r[i].api_events == 0 && r[i].auxiliary_api_events == 0, "dropped report with API events");
        c->dropped_activities += r[i].activities;
    }
    c->dropped_ids += n;
    return 0;
}

static int32_t on_duplicates(void *user, const rcb_correlation_report *r, size_t n) {
    collected *c = (collected *)user;
    for (size_t i = 0; i < n; i++) CHECK(r[i].correlation_id == 9 && r[i].api_events == 2, "duplicate report");
    c->duplicate_ids += n;
    return 0;
}

static rcb_correlator_sink sink_of(collected *c) {
    rcb_correlator_sink s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.user_data = c;
    s.activities = on_activities;
    s.api_events = on_api_events;
    s.api_events_without_activity = on_without_activity;
    s.dropped = on_dropped;
    s.duplicates = on_duplicates;
    return s;
}

static void release(collected *c) {
    for (int d = 0; d < 2; d++) free(c->per_device[d]);
    memset(c, 0, sizeof *c);
}

static rcb_api_event api(uint64_t id, uint64_t start, uint32_t flags) {
    rcb_api_event e;
    memset(&e, 0, sizeof e);
    e.correlation_id = id;
    e.start_ns = start;
    e.end_ns = start + 100;
    e.name = (uint64_t)(uintptr_t) "hipGraphLaunch"; /* a pointer value: stored, never read */
    e.thread_id = 1;
    e.flags = flags;
    return e;
}

static rcb_activity act(uint64_t id, uint32_t device, uint64_t start) {
    rcb_activity a;
    memset(&a, 0, sizeof a);
    a.correlation_id = id;
    a.start_ns = start;
    a.end_ns = start + 10;
    a.stream_id = 3;
    a.device_id = device;
    return a;
}

static void add_api(rcb_correlator *c, rcb_api_event e) {
    rcb_status s = rcb_correlator_add_api_event(c, &e);
    CHECK(s == RCB_OK, "add_api_event: %s", last_error());
}

static void add_act(rcb_correlator *c, rcb_activity a) {
    rcb_status s = rcb_correlator_add_activity(c, &a);
    CHECK(s == RCB_OK, "add_activity: %s", last_error());
}

int main(void) {
    rcb_correlator_config config;
    memset(&config, 0, sizeof config);
    config.struct_size = sizeof config;
    rcb_correlator *c = NULL;
    CHECK(rcb_correlator_new(&config, &c) == RCB_OK && c != NULL, "new: %s", last_error());

    /* A graph launch on device 1: one API event, 1000 kernels, added in one batch. */
    add_api(c, api(7, 100, 0));
    rcb_activity kernels[KERNELS];
    for (int k = 0; k < KERNELS; k++) kernels[k] = act(7, 1, 1000 + (uint64_t)k * 20);
    CHECK(rcb_correlator_add_activities(c, kernels, KERNELS) == RCB_OK, "add_activities: %s", last_error());
    /* 1 and 1 + 2^32: the same 32-bit id, two launches. */
    add_api(c, api(1, 10, 0));
    add_api(c, api(HIGH_ID, 20, 0));
    add_act(c, act(1, 0, 500));
    add_act(c, act(HIGH_ID, 0, 600));
    /* Lost API event: two activities, one dropped report. */
    add_act(c, act(8, 0, 700));
    add_act(c, act(8, 0, 710));
    /* Two main API events under one id. */
    add_api(c, api(9, 30, 0));
    add_api(c, api(9, 31, 0));
    add_act(c, act(9, 0, 800));
    /* Only an auxiliary API event; and an API event whose call reached no device. */
    add_api(c, api(10, 40, RCB_API_EVENT_AUXILIARY));
    add_act(c, act(10, 0, 900));
    add_api(c, api(11, 50, 0));

    collected got;
    memset(&got, 0, sizeof got);
    rcb_correlator_sink sink = sink_of(&got);
    rcb_correlator_summary summary;
    SIZED(summary);
    CHECK(rcb_correlator_exchange(c, &sink, &summary) == RCB_OK, "exchange: %s", last_error());
    CHECK(got.count[1] == KERNELS, "device 1 got %zu records", got.count[1]);
    for (size_t k = 0; k < got.count[1]; k++) {
        CHECK(got.per_device[1][k].api_id == 7, "kernel %zu joined to %llu", k, (unsigned long long)got.per_device[1][k].api_id);
        CHECK(got.per_device[1][k].activity.start_ns == 1000 + k * 20, "kernel %zu out of order", k);
    }
    CHECK(got.count[0] == 6, "device 0 got %zu records", got.count[0]);
    for (size_t k = 0; k < got.count[0]; k++) {
        const record *r = &got.per_device[0][k];
        uint64_t id = r->activity.correlation_id;
        uint64_t expected = id == 8 ? 0 : id;
        CHECK(r->api_id == expected, "id %llu joined to %llu", (unsigned long long)id, (unsigned long long)r->api_id);
        if (id == 10) CHECK(r->api_flags == RCB_API_EVENT_AUXILIARY, "id 10 not joined to its auxiliary event");
    }
    CHECK(got.dropped_ids == 1 && got.dropped_activities == 2, "dropped %llu ids", (unsigned long long)got.dropped_ids);
    CHECK(got.duplicate_ids == 1, "duplicates %llu", (unsigned long long)got.duplicate_ids);
    CHECK(got.api_events == 4 && got.api_events_without_activity == 1, "api events %llu + %llu",
          (unsigned long long)got.api_events, (unsigned long long)got.api_events_without_activity);
    CHECK(summary.activities == KERNELS + 6 && summary.joined_main == KERNELS + 3 && summary.joined_auxiliary == 1 &&
              summary.without_api == 2 && summary.duplicate_api_events == 1,
          "summary");
    release(&got);

    /* A second flush finds nothing; a failing callback keeps the events for the next one. */
    sink = sink_of(&got);
    CHECK(rcb_correlator_exchange(c, &sink, &summary) == RCB_OK && got.calls == 0 && summary.activities == 0, "second flush");
    add_api(c, api(12, 0, 0));
    add_act(c, act(12, 0, 5));
    got.fail = 5;
    CHECK(rcb_correlator_exchange(c, &sink, &summary) == RCB_STATUS_CALLBACK_FAILED, "failing callback");
    CHECK(strstr(last_error(), "returned 5") != NULL, "message: %s", last_error());
    got.fail = 0;
    CHECK(rcb_correlator_exchange(c, &sink, &summary) == RCB_OK && got.count[0] == 1, "the events came back");
    release(&got);

    /* Clearing keeps the memory; counters say so. */
    add_act(c, act(13, 0, 5));
    CHECK(rcb_correlator_clear(c) == RCB_OK, "clear");
    rcb_correlator_counters counters;
    SIZED(counters);
    CHECK(rcb_correlator_stats(c, &counters) == RCB_OK, "stats");
    CHECK(counters.pending_activities == 0 && counters.reserved_bytes > 0 && counters.shards == RCB_CORRELATOR_DEFAULT_SHARDS,
          "counters");
    /* Trimming gives that memory back. */
    uint64_t kept = counters.reserved_bytes;
    CHECK(rcb_correlator_trim(c) == RCB_OK && rcb_correlator_stats(c, &counters) == RCB_OK, "trim");
    CHECK(counters.reserved_bytes < kept, "trim kept %llu of %llu bytes", (unsigned long long)counters.reserved_bytes,
          (unsigned long long)kept);

    /* Errors. */
    rcb_activity a = act(1, 0, 0);
    CHECK(rcb_correlator_add_activity(NULL, &a) == RCB_STATUS_NULL_ARGUMENT, "NULL handle");
    CHECK(rcb_correlator_add_activity(c, NULL) == RCB_STATUS_NULL_ARGUMENT, "NULL activity");
    rcb_api_event bad = api(1, 0, 0x80);
    CHECK(rcb_correlator_add_api_event(c, &bad) == RCB_STATUS_INVALID_ARGUMENT, "unknown flag");
    CHECK(rcb_correlator_exchange(c, NULL, &summary) == RCB_STATUS_NULL_ARGUMENT, "NULL sink");
    config.shards = RCB_CORRELATOR_MAX_SHARDS + 1;
    rcb_correlator *unused = NULL;
    CHECK(rcb_correlator_new(&config, &unused) == RCB_STATUS_INVALID_ARGUMENT && unused == NULL, "too many shards");
    CHECK(rcb_correlator_free(c) == RCB_OK, "free");
    CHECK(rcb_correlator_add_activity(c, &a) == RCB_STATUS_INVALID_HANDLE, "freed handle");
    CHECK(rcb_correlator_free(c) == RCB_STATUS_INVALID_HANDLE, "double free");
    CHECK(rcb_correlator_free(NULL) == RCB_OK, "free(NULL)");

    if (failures) {
        fprintf(stderr, "correlator: %d check(s) failed\n", failures);
    } else {
        printf("correlator: ok\n");
    }
    return failures ? 1 : 0;
}
