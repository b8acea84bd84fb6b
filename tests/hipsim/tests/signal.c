/* Signal memory and stream memory operations. */
#include "check.h"

int main(void) {
    uint64_t allocs = hipsimLiveCount("alloc");
    uint64_t *sig;
    EXPECT_ERR(hipExtMallocWithFlags((void **)&sig, 16, hipMallocSignalMemory), hipErrorInvalidValue);
    CHECK(hipExtMallocWithFlags((void **)&sig, 8, hipMallocSignalMemory));
    EXPECT(__atomic_load_n(sig, __ATOMIC_ACQUIRE) == 0); /* a real host pointer */
    EXPECT(hipsimLiveCount("alloc") == allocs + 1);

    hipModule_t m = load_module();
    hipFunction_t sleepk = get_fn(m, "rcb_test_sleep"), fill = get_fn(m, "rcb_test_fill_u32");
    hipStream_t s, s2;
    CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    CHECK(hipStreamCreateWithFlags(&s2, hipStreamNonBlocking));

    /* The write happens in stream order, after the sleep; the host polls without synchronizing. */
    uint64_t us = 40000;
    void *sp[] = {&us};
    double t0 = now_ms();
    CHECK(hipModuleLaunchKernel(sleepk, 1, 1, 1, 1, 1, 1, 0, s, sp, NULL));
    CHECK(hipStreamWriteValue64(s, sig, 7, 0));
    EXPECT(__atomic_load_n(sig, __ATOMIC_ACQUIRE) == 0);
    while (__atomic_load_n(sig, __ATOMIC_ACQUIRE) != 7) {
        EXPECT(now_ms() - t0 < 5000);
    }
    EXPECT(now_ms() - t0 >= 35.0);

    /* hipStreamWaitValue64 holds a stream until the host writes the signal. */
    uint32_t *buf, host[4];
    CHECK(hipMalloc((void **)&buf, 16));
    CHECK(hipMemsetD32(buf, 0, 4));
    CHECK(hipStreamWaitValue64(s2, sig, 10, hipStreamWaitValueGte, ~0ull));
    launch_fill(fill, buf, 3, 4, s2);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    EXPECT_ERR(hipStreamQuery(s2), hipErrorNotReady);
    __atomic_store_n(sig, 10, __ATOMIC_RELEASE);
    CHECK(hipStreamSynchronize(s2));
    CHECK(hipMemcpy(host, buf, 16, hipMemcpyDeviceToHost));
    expect_u32(host, 4, 3);

    /* Writes to ordinary device memory work too; bad addresses are sticky errors. */
    CHECK(hipStreamWriteValue64(s, buf, 0x1122334455667788ull, 0));
    CHECK(hipStreamSynchronize(s));
    uint64_t v;
    CHECK(hipMemcpy(&v, buf, 8, hipMemcpyDeviceToHost));
    EXPECT(v == 0x1122334455667788ull);
    CHECK(hipStreamWriteValue64(s, (char *)buf + 16, 1, 0));
    EXPECT_ERR(hipStreamSynchronize(s), hipErrorIllegalAddress);

    CHECK(hipFree(sig));
    CHECK(hipFree(buf));
    EXPECT(hipsimLiveCount("alloc") == allocs);
    CHECK(hipStreamDestroy(s)); CHECK(hipStreamDestroy(s2));
    CHECK(hipModuleUnload(m));
    PASS();
}
