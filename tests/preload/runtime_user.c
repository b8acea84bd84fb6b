/* One framework's use of the HIP runtime it was linked against: built twice by run.sh, against
 * two copies of the software GPU under different sonames, and dlopen'ed (RTLD_LOCAL) by
 * two_runtimes.c. Its stream calls bind to the preload when one is loaded, its other calls to
 * its own copy, so a stream handed to it from the other copy fails its own hipStreamQuery.
 * Built with -DTSL_LOADER -DHIP_SONAME=..., it links no HIP and takes its copy's functions from
 * the copy's own handle with dlsym (tsl_loader.h), so that the preload binds each copy's
 * functions by their handle. */
#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

uint64_t hipsimGetCallCount(const char *name);
uint64_t hipsimLiveCount(const char *kind);

#include "tsl_loader.h"

/* Creates n streams into held: each must be live in this runtime and distinct from the others;
 * returns 0, or 1 after saying what failed. */
int user_create(int n, hipStream_t *held) {
    for (int i = 0; i < n; i++) {
        hipError_t rc = WRAP(hipStreamCreate)(&held[i]);
        if (rc != hipSuccess) {
            fprintf(stderr, "hipStreamCreate %d: %d\n", i, (int)rc);
            return 1;
        }
        if ((rc = WRAP(hipStreamQuery)(held[i])) != hipSuccess) {
            fprintf(stderr, "stream %d (%p) is not one of this runtime's: hipStreamQuery -> %d\n", i, (void *)held[i], (int)rc);
            return 1;
        }
        for (int j = 0; j < i; j++) {
            if (held[j] == held[i]) {
                fprintf(stderr, "stream %p handed out twice\n", (void *)held[i]);
                return 1;
            }
        }
    }
    return 0;
}

int user_destroy(int n, hipStream_t *held) {
    for (int i = 0; i < n; i++) {
        hipError_t rc = WRAP(hipStreamDestroy)(held[i]);
        if (rc != hipSuccess) {
            fprintf(stderr, "hipStreamDestroy %d (%p): %d\n", i, (void *)held[i], (int)rc);
            return 1;
        }
    }
    return 0;
}

/* Streams this runtime created: by the program (hipStreamCreate) or by the preload on a miss. */
uint64_t user_creations(void) {
    return WRAP(hipsimGetCallCount)("hipStreamCreate") + WRAP(hipsimGetCallCount)("hipStreamCreateWithPriority");
}

uint64_t user_live(void) {
    return WRAP(hipsimLiveCount)("stream");
}
