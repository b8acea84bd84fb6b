/* Error paths of the C ABI, compiled as C11 (this file) and as C++17 (abi_errors.cpp includes it).
 * Usage: abi_errors MODE [TEXT], where MODE is the situation the environment sets up:
 *   basic       any environment: status strings, version, NULL arguments, last-error buffer rules
 *   unloadable  RCB_BACKEND=hip RCB_HIP_LIBRARY=<missing file>: the runtime cannot load
 *   no-device   RCB_BACKEND=hip RCB_HIP_LIBRARY=<real libamdhip64 on a machine without GPU>; the
 *               message also holds TEXT when given (ci/hip-versions.sh: the runtime's version)
 *   bad-config  RCB_BACKEND=<garbage>
 *   loads       RCB_HIP_LIBRARY=<the software GPU>: the runtime loads and reports devices
 * Exits 0 when every check holds, 1 otherwise (each failed check is printed). */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t trace_nothing(void *user_data, void *stream) {
    (void)user_data;
    (void)stream;
    return 0;
}

static void basic(void) {
    for (rcb_status s = RCB_OK; s <= RCB_STATUS_PANIC; s++) {
        const char *text = rcb_status_str(s);
        CHECK(text != NULL && strncmp(text, "RCB_", 4) == 0, "status %d -> %s", (int)s, text ? text : "(null)");
    }
    CHECK(strcmp(rcb_status_str(9999), "unknown rcb_status code") == 0, "unknown code text: %s", rcb_status_str(9999));

    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", RCB_VERSION_MAJOR, RCB_VERSION_MINOR, RCB_VERSION_PATCH);
    CHECK(strcmp(rcb_version(), expected) == 0, "rcb_version %s, header says %s", rcb_version(), expected);

    rcb_status s = rcb_runtime_load(NULL);
    CHECK(s == RCB_STATUS_NULL_ARGUMENT, "rcb_runtime_load(NULL) returned %d", (int)s);
    CHECK(strstr(last_error(), "`out`") != NULL, "message does not name the argument: %s", last_error());

    /* A handle that was never created is looked up, not dereferenced. */
    struct rcb_vmm_pool *forged = (struct rcb_vmm_pool *)(uintptr_t)0x1230;
    s = rcb_vmm_pool_free(forged);
    CHECK(s == RCB_STATUS_INVALID_HANDLE, "freeing a forged handle returned %d", (int)s);
    CHECK(strstr(last_error(), "not live") != NULL, "message: %s", last_error());
    struct rcb_vmm_slot slot;
    SIZED(slot);
    s = rcb_vmm_pool_acquire(forged, &slot);
    CHECK(s == RCB_STATUS_INVALID_HANDLE, "acquire on a forged handle returned %d", (int)s);
    CHECK(rcb_vmm_pool_free(NULL) == RCB_OK, "free(NULL) must be a no-op");

    /* One rule for NULL handles of every type: RCB_STATUS_NULL_ARGUMENT naming the argument. */
    EXPECT_FAIL(rcb_vmm_pool_acquire(NULL, &slot), RCB_STATUS_NULL_ARGUMENT, "`pool`");
    EXPECT_FAIL(rcb_cmdbuf_finalize(NULL), RCB_STATUS_NULL_ARGUMENT, "`cb`");
    void *graph;
    uint32_t outcome;
    EXPECT_FAIL(rcb_trace_cache_get_or_trace(NULL, NULL, NULL, 0, trace_nothing, NULL, &graph, &outcome),
                RCB_STATUS_NULL_ARGUMENT, "`tc`");
    EXPECT_FAIL(rcb_correlator_clear(NULL), RCB_STATUS_NULL_ARGUMENT, "`c`");
    EXPECT_FAIL(rcb_stream_release(NULL), RCB_STATUS_NULL_ARGUMENT, "`stream`");

    /* A sized struct whose struct_size was not set is refused, naming it, and left as it was. */
    rcb_runtime_info unset;
    memset(&unset, 0, sizeof unset);
    EXPECT_FAIL(rcb_runtime_load(&unset), RCB_STATUS_INVALID_ARGUMENT, "`out->struct_size` is 0");
    CHECK(unset.struct_size == 0 && unset.library[0] == '\0', "a refused output was written");

    s = rcb_runtime_load(NULL);
    /* Length-only query, and truncation that still NUL-terminates. */
    size_t full = rcb_last_error_message(NULL, 0);
    CHECK(full == strlen("argument `out` is NULL"), "full length %zu", full);
    char tiny[5];
    memset(tiny, 'x', sizeof tiny);
    CHECK(rcb_last_error_message(tiny, sizeof tiny) == full, "truncated call must return the full length");
    CHECK(strcmp(tiny, "argu") == 0, "truncated copy is '%.5s'", tiny);
}

static void expect_load_failure(rcb_status expected, const char *needle) {
    rcb_runtime_info info;
    memset(&info, 0xAB, sizeof info);
    info.struct_size = sizeof info;
    rcb_status s = rcb_runtime_load(&info);
    CHECK(s == expected, "rcb_runtime_load returned %d (%s), expected %d; message: %s", (int)s, rcb_status_str(s),
          (int)expected, last_error());
    CHECK(strstr(last_error(), needle) != NULL, "message lacks '%s': %s", needle, last_error());
    CHECK(info.backend == (int32_t)0xABABABAB, "output written on failure");
    /* A failed load is remembered and reported again. */
    CHECK(rcb_runtime_load(&info) == expected, "second load attempt changed status");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (strcmp(mode, "basic") == 0) {
        basic();
    } else if (strcmp(mode, "unloadable") == 0) {
        expect_load_failure(RCB_STATUS_RUNTIME_UNAVAILABLE, "cannot be loaded");
    } else if (strcmp(mode, "no-device") == 0) {
        /* argv[2], when given, must be in the message too: the runtime's version, say. */
        expect_load_failure(RCB_STATUS_NO_DEVICE, argc > 2 ? argv[2] : "sees no device");
        CHECK(strstr(last_error(), "sees no device") != NULL, "message lacks 'sees no device': %s", last_error());
    } else if (strcmp(mode, "bad-config") == 0) {
        expect_load_failure(RCB_STATUS_CONFIG, "RCB_BACKEND");
    } else if (strcmp(mode, "loads") == 0) {
        rcb_runtime_info info;
        SIZED(info);
        rcb_status s = rcb_runtime_load(&info);
        CHECK(s == RCB_OK, "load failed: %s", last_error());
        CHECK(info.struct_size == sizeof info, "struct_size %u after the load: the bytes written", (unsigned)info.struct_size);
        CHECK(s != RCB_OK || (info.backend == RCB_BACKEND_HIP && info.device_count >= 1 && info.library[0] != '\0'),
              "info: backend %d, %d devices, library '%s'", (int)info.backend, (int)info.device_count, info.library);
        CHECK(rcb_last_error_message(NULL, 0) == 0, "success left a message: %s", last_error());
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%s: %s\n", mode, failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
