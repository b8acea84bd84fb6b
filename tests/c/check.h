/* What every C test here shares: a failure counter, a CHECK that records a failure with its file,
 * line and condition and goes on, the library's last error message, and the HIP/RCB/EXPECT_FAIL
 * macros of the programs that drive the software GPU. Included once per program (the
 * definitions are static). */
#ifndef RCB_TESTS_C_CHECK_H
#define RCB_TESTS_C_CHECK_H

#include "rocm_cmdbuf.h"

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

/* The calling thread's last error message; a message that does not fit is a failure. */
static const char *last_error(void) {
    static char buf[1024];
    size_t n = rcb_last_error_message(buf, sizeof buf);
    CHECK(n < sizeof buf, "message of %zu bytes truncated", n);
    return buf;
}

/* Readies a sized struct (the rule at the top of rocm_cmdbuf.h) as a caller must: zeroed, with
 * struct_size set to its size in this header; in C and C++ alike. */
#define SIZED(var) (memset(&(var), 0, sizeof(var)), (var).struct_size = (uint32_t)sizeof(var))

/* A device pointer as the library takes it. */
static inline uint64_t dptr(const void *p) { return (uint64_t)(uintptr_t)p; }

/* The bits of a float, for a u32 fill of float data. */
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A HIP call the program needs: stop on failure (programs that include the HIP headers). */
#define HIP(call)                                                                          \
    do {                                                                                   \
        hipError_t e_ = (call);                                                            \
        if (e_ != hipSuccess) {                                                            \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, (int)e_); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* A library call the program needs: stop on failure. */
#define RCB(call)                                                                          \
    do {                                                                                   \
        rcb_status s_ = (call);                                                            \
        if (s_ != RCB_OK) {                                                                \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call,      \
                    rcb_status_str(s_), last_error());                                    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* A library call that must fail with `status` and a message containing `needle`. */
#define EXPECT_FAIL(call, status, needle)                                                  \
    do {                                                                                   \
        rcb_status s_ = (call);                                                            \
        CHECK(s_ == (status) && strstr(last_error(), (needle)) != NULL,                    \
              "returned %s, message '%s'; expected %s and '%s'", rcb_status_str(s_),       \
              last_error(), rcb_status_str(status), (needle));                             \
    } while (0)

#endif
