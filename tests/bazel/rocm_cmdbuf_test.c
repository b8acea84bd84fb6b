/* Links @rocm_cmdbuf//:rocm_cmdbuf and checks that the installed library answers through the
 * installed header. RCB_EXPECTED_VERSION (environment, optional): the version the installed
 * file name carries. */
#ifndef ROCM_CMDBUF_AVAILABLE
#error "ROCM_CMDBUF_AVAILABLE is not defined by @rocm_cmdbuf//:rocm_cmdbuf"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rocm_cmdbuf.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static int failures;

static void check(int ok, const char *what, const char *got) {
    printf("%s %s (got \"%s\")\n", ok ? "ok:  " : "FAIL:", what, got);
    if (!ok) failures++;
}

int main(void) {
    const char *header_version =
        STR(RCB_VERSION_MAJOR) "." STR(RCB_VERSION_MINOR) "." STR(RCB_VERSION_PATCH);
    const char *version = rcb_version();
    check(strcmp(version, header_version) == 0, "rcb_version() equals the header's RCB_VERSION_*", version);
    const char *expected = getenv("RCB_EXPECTED_VERSION");
    if (expected && *expected)
        check(strcmp(version, expected) == 0, "rcb_version() equals the installed file's version", version);

    const char *desc = rcb_status_str(RCB_STATUS_NULL_ARGUMENT);
    check(strncmp(desc, "RCB_STATUS_NULL_ARGUMENT", 24) == 0, "rcb_status_str(RCB_STATUS_NULL_ARGUMENT)", desc);

    rcb_status st = rcb_cmdbuf_new(0, NULL);
    char code[32];
    snprintf(code, sizeof code, "%d", (int)st);
    check(st == RCB_STATUS_NULL_ARGUMENT, "rcb_cmdbuf_new(0, NULL) is RCB_STATUS_NULL_ARGUMENT", code);
    char msg[256];
    rcb_last_error_message(msg, sizeof msg);
    check(strstr(msg, "`out`") != NULL, "its last-error message names the argument `out`", msg);

    printf("%s\n", failures ? "rocm_cmdbuf Bazel test FAILED" : "rocm_cmdbuf Bazel test passed");
    return failures ? 1 : 0;
}
