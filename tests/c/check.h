/* What every C test here shares: a failure counter, a CHECK that records a failure with its file,
 * line and condition and goes on, and the library's last error message. Included once per
 * program (the definitions are static). */
#ifndef RCB_TESTS_C_CHECK_H
#define RCB_TESTS_C_CHECK_H

#include "rocm_cmdbuf.h"

#include <stdio.h>

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

/* The calling thread's last error message; a message that does not fit is a failure. */
static const char *last_error(void) {
    static char buf[1024];
    size_t n = rcb_last_error_message(buf, sizeof buf);
    CHECK(n < sizeof buf, "message of %zu bytes truncated", n);
    return buf;
}

#endif
