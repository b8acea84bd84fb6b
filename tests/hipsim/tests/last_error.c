/* The thread's last error (hipGetLastError, hipPeekAtLastError) by ROCm version (HIPSIM_VERSION):
 * before 6.4 every call stores its result, success included; from 6.4 only a failure other than
 * hipErrorNotReady does, and it stays until hipGetLastError takes it. Either way it is per thread
 * and hipGetLastError resets it.
 * Usage: last_error every-call|failures */
#include "check.h"

#include <pthread.h>

static void *other_thread(void *arg) {
    (void)arg;
    /* The main thread's error is not this thread's. */
    return (void *)(intptr_t)hipPeekAtLastError();
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "every-call") && strcmp(argv[1], "failures"))) {
        fprintf(stderr, "usage: last_error every-call|failures\n");
        return 2;
    }
    int sticky = !strcmp(argv[1], "failures");
    int d;
    EXPECT(hipGetLastError() == hipSuccess);
    EXPECT_ERR(hipSetDevice(99), hipErrorInvalidDevice);
    EXPECT(hipPeekAtLastError() == hipErrorInvalidDevice);
    EXPECT(hipPeekAtLastError() == hipErrorInvalidDevice); /* peeking leaves it */
    pthread_t t;
    void *seen;
    EXPECT(pthread_create(&t, NULL, other_thread, NULL) == 0 && pthread_join(t, &seen) == 0);
    EXPECT((intptr_t)seen == hipSuccess);
    /* A successful call: before 6.4 it replaces the error, from 6.4 it leaves it. */
    CHECK(hipGetDevice(&d));
    EXPECT(hipPeekAtLastError() == (sticky ? hipErrorInvalidDevice : hipSuccess));
    EXPECT(hipGetLastError() == (sticky ? hipErrorInvalidDevice : hipSuccess));
    EXPECT(hipGetLastError() == hipSuccess); /* taken */
    /* An injected fault is a failure like any other; a later failure replaces an earlier one. */
    EXPECT(hipsimSetFaults("hipGetDevice:1:2") == 0);
    EXPECT_ERR(hipGetDevice(&d), hipErrorOutOfMemory);
    EXPECT_ERR(hipSetDevice(99), hipErrorInvalidDevice);
    EXPECT(hipPeekAtLastError() == hipErrorInvalidDevice);
    /* hipErrorNotReady: a query of unfinished work is no error to keep from 6.4. */
    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    EXPECT(hipsimSetFaults("hipStreamQuery:1:600") == 0);
    EXPECT_ERR(hipStreamQuery(s), hipErrorNotReady);
    EXPECT(hipPeekAtLastError() == (sticky ? hipErrorInvalidDevice : hipErrorNotReady));
    EXPECT(hipsimSetFaults("") == 0);
    CHECK(hipStreamDestroy(s));
    (void)hipGetLastError();
    PASS();
}
