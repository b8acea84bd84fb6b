/* Shared helpers for the hipsim C suite. Compiled against the ROCm 5.2 headers; where
 * hipsim follows the ROCm 6.x ABI instead, the tests use the local definitions below. */
#ifndef HIPSIM_CHECK_H
#define HIPSIM_CHECK_H

#define _POSIX_C_SOURCE 200809L

#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* hipsim test hooks (not in any HIP header). */
uint64_t hipsimGetCallCount(const char *name);
void hipsimResetCallCounts(void);
uint64_t hipsimLiveCount(const char *kind);
int hipsimSetFaults(const char *spec);
int hipsimSetQuirks(const char *spec);
int hipsimSetLatency(const char *spec);
void hipsimSetKernargPool(uint64_t bytes);

/* ROCm 6.x hipGraphNodeType numbering (the 5.2 header is shifted by one). */
enum {
    NODE_KERNEL = 0, NODE_MEMCPY = 1, NODE_MEMSET = 2, NODE_HOST = 3, NODE_GRAPH = 4,
    NODE_EMPTY = 5, NODE_WAIT_EVENT = 6, NODE_EVENT_RECORD = 7, NODE_BATCH_MEM_OP = 14
};

/* ROCm >= 5.3 hipMemAllocationProp layout (the 5.2 header has a different field order). */
typedef struct {
    int type;
    int requestedHandleType;
    hipMemLocation location;
    void *win32HandleMetaData;
    struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; } allocFlags;
} prop6_t;
_Static_assert(sizeof(prop6_t) == 32, "hipMemAllocationProp is 32 bytes");

#define CHECK(x) do { hipError_t e_ = (x); if (e_ != hipSuccess) { \
    fprintf(stderr, "%s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)e_, hipGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT_ERR(x, code) do { hipError_t e_ = (x); if ((int)e_ != (int)(code)) { \
    fprintf(stderr, "%s:%d: %s -> %d, expected %d\n", __FILE__, __LINE__, #x, (int)e_, (int)(code)); exit(1); } } while (0)
#define EXPECT(c) do { if (!(c)) { fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

static inline double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static inline hipModule_t load_module(void) {
    hipModule_t m;
    CHECK(hipModuleLoadData(&m, "hipsim"));
    return m;
}

static inline hipFunction_t get_fn(hipModule_t m, const char *name) {
    hipFunction_t f;
    CHECK(hipModuleGetFunction(&f, m, name));
    return f;
}

/* Packed kernarg buffers (natural alignment, no tail padding) for the built-in kernels. */
typedef struct { void *dst; uint32_t value; uint32_t pad; uint64_t n; } fill_args_t;   /* 24 bytes */
typedef struct { void *y; const void *x; float a; uint32_t pad; uint64_t n; } axpy_args_t; /* 32 bytes */

static inline void launch_fill(hipFunction_t f, void *dst, uint32_t v, uint64_t n, hipStream_t s) {
    void *args[] = {&dst, &v, &n};
    CHECK(hipModuleLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, NULL));
}

static inline void expect_u32(const uint32_t *p, size_t n, uint32_t v) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != v) { fprintf(stderr, "element %zu: %u != %u\n", i, p[i], v); exit(1); }
    }
}

#define PASS() do { printf("ok\n"); return 0; } while (0)

#endif
