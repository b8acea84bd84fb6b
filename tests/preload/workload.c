/* The client re-creation pattern of an unpatched XLA: 50 times, create 112 streams (the four
 * creation calls, several flags and priorities), check them, do work on each, destroy them all.
 * Built as a shared object so that the driver can link it or dlopen it late (RTLD_LOCAL, as
 * Python loads jaxlib). Built with -DTSL_LOADER, it links no HIP at all and takes every HIP
 * function from the runtime's own handle with dlsym, as XLA up to rocm-jaxlib-v0.8.0 does
 * (tsl_loader.h). Prints the number of stream creations hipsim saw. */
#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t hipsimGetCallCount(const char *name);

#include "tsl_loader.h"

#define STREAMS 112
#define ROUNDS 50
#define BYTES 4096

#define CHECK(x) do { hipError_t e_ = (x); if (e_ != hipSuccess) { \
    fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)e_); return 1; } } while (0)
#define EXPECT(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } } while (0)

/* Stream i is created with call i % 4; these are the flags and priority it must read back. */
static hipError_t create(int i, hipStream_t *s, unsigned *flags, int *priority) {
    switch (i % 4) {
    case 0: *flags = 0; *priority = 0; return WRAP(hipStreamCreate)(s);
    case 1: *flags = hipStreamNonBlocking; *priority = 0; return WRAP(hipStreamCreateWithFlags)(s, *flags);
    case 2: *flags = 0; *priority = -1; return WRAP(hipStreamCreateWithPriority)(s, *flags, *priority);
    default: *flags = hipStreamNonBlocking; *priority = 1; return WRAP(hipStreamCreateWithPriority)(s, *flags, *priority);
    }
}

int run_workload(void) {
    uint8_t *device = NULL;
    static uint8_t host[STREAMS][BYTES];
    CHECK(WRAP(hipMalloc)((void **)&device, (size_t)STREAMS * BYTES));
    for (int round = 0; round < ROUNDS; round++) {
        hipStream_t streams[STREAMS];
        for (int i = 0; i < STREAMS; i++) {
            unsigned want_flags, flags;
            int want_priority, priority;
            CHECK(create(i, &streams[i], &want_flags, &want_priority));
            CHECK(WRAP(hipStreamGetFlags)(streams[i], &flags));
            CHECK(WRAP(hipStreamGetPriority)(streams[i], &priority));
            EXPECT(flags == want_flags && priority == want_priority,
                   "round %d stream %d: flags %u priority %d, expected %u %d", round, i, flags, priority,
                   want_flags, want_priority);
            for (int j = 0; j < i; j++) {
                EXPECT(streams[j] != streams[i], "round %d: streams %d and %d are the same handle", round, j, i);
            }
        }
        for (int i = 0; i < STREAMS; i++) {
            CHECK(WRAP(hipMemsetAsync)(device + (size_t)i * BYTES, (round * STREAMS + i) & 0xff, BYTES, streams[i]));
        }
        for (int i = 0; i < STREAMS; i++) {
            CHECK(WRAP(hipStreamSynchronize)(streams[i]));
            CHECK(WRAP(hipMemcpy)(host[i], device + (size_t)i * BYTES, BYTES, hipMemcpyDeviceToHost));
            for (int b = 0; b < BYTES; b++) {
                EXPECT(host[i][b] == ((round * STREAMS + i) & 0xff), "round %d stream %d byte %d: %u", round, i, b,
                       host[i][b]);
            }
            CHECK(WRAP(hipStreamDestroy)(streams[i]));
        }
    }
    CHECK(WRAP(hipFree)(device));
    uint64_t created = WRAP(hipsimGetCallCount)("hipStreamCreate") + WRAP(hipsimGetCallCount)("hipStreamCreateWithFlags") +
                       WRAP(hipsimGetCallCount)("hipStreamCreateWithPriority");
    printf("stream creations: %llu\n", (unsigned long long)created);
    return 0;
}
