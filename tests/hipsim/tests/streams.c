/* Streams, events, device queries. */
#include "check.h"

#include <dirent.h>

/* Threads of this process (entries of /proc/self/task). */
static int threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (d == NULL) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int main(void) {
    int v = 0, least = 0, greatest = 0;
    CHECK(hipRuntimeGetVersion(&v));
    EXPECT(v == 70253211); /* ROCm 7.2.4 unless HIPSIM_VERSION says otherwise */
    CHECK(hipDriverGetVersion(&v));
    CHECK(hipDeviceGetAttribute(&v, (hipDeviceAttribute_t)89, 0)); /* VMM supported, ROCm >= 5.3 */
    EXPECT(v == 1);
    CHECK(hipDeviceGetAttribute(&v, hipDeviceAttributeCanUseStreamWaitValue, 1));
    EXPECT(v == 1);
    CHECK(hipDeviceGetAttribute(&v, hipDeviceAttributeWarpSize, 0));
    EXPECT(v == 64);
    EXPECT_ERR(hipDeviceGetAttribute(&v, (hipDeviceAttribute_t)5555, 0), hipErrorInvalidValue);
    EXPECT_ERR(hipDeviceGetAttribute(&v, hipDeviceAttributeWarpSize, 7), hipErrorInvalidDevice);
    {
        /* The ROCm 6.x properties: the 6.x headers call them by these names; older ones know
         * neither, so the layout is spelled out (name at 0, gcnArchName at 1160, 1472 bytes).
         * The older call and struct are checked with the older headers, which declare them. */
#if HIP_VERSION_MAJOR >= 6
        hipDeviceProp_tR0600 props;
        memset(&props, 0xAB, sizeof props);
        CHECK(hipGetDevicePropertiesR0600(&props, 1));
        EXPECT(strcmp(props.name, "hipsim") == 0 && strcmp(props.gcnArchName, "hipsim") == 0 && props.warpSize == 0);
        EXPECT_ERR(hipGetDevicePropertiesR0600(&props, 7), hipErrorInvalidDevice);
        EXPECT_ERR(hipGetDevicePropertiesR0600(NULL, 0), hipErrorInvalidValue);
#else
        extern hipError_t hipGetDevicePropertiesR0600(void *prop, int device);
        static unsigned char props[1472 + 8];
        memset(props, 0xAB, sizeof props);
        CHECK(hipGetDevicePropertiesR0600(props, 1));
        EXPECT(strcmp((const char *)props, "hipsim") == 0 && strcmp((const char *)props + 1160, "hipsim") == 0);
        EXPECT(props[1471] == 0 && props[1472] == 0xAB);
        EXPECT_ERR(hipGetDevicePropertiesR0600(props, 7), hipErrorInvalidDevice);
        EXPECT_ERR(hipGetDevicePropertiesR0600(NULL, 0), hipErrorInvalidValue);
        hipDeviceProp_t old;
        memset(&old, 0xAB, sizeof old);
        CHECK(hipGetDeviceProperties(&old, 0));
        EXPECT(strcmp(old.name, "hipsim") == 0 && strcmp(old.gcnArchName, "hipsim") == 0 && old.warpSize == 0);
        EXPECT_ERR(hipGetDeviceProperties(&old, 7), hipErrorInvalidDevice);
#endif
    }
    CHECK(hipDeviceGetStreamPriorityRange(&least, &greatest));
    EXPECT(least == 1 && greatest == -1);
    CHECK(hipDeviceCanAccessPeer(&v, 0, 1));
    EXPECT(v == 1);
    CHECK(hipDeviceCanAccessPeer(&v, 0, 0));
    EXPECT(v == 0);

    uint64_t live = hipsimLiveCount("stream");
    hipStream_t s1, s2, s3;
    CHECK(hipStreamCreateWithFlags(&s1, hipStreamNonBlocking));
    CHECK(hipStreamCreateWithPriority(&s2, 0, -7));
    CHECK(hipStreamCreate(&s3));
    unsigned flags = 9;
    int prio = 9;
    CHECK(hipStreamGetFlags(s1, &flags));
    EXPECT(flags == hipStreamNonBlocking);
    CHECK(hipStreamGetPriority(s2, &prio));
    EXPECT(prio == -1);
    EXPECT(hipsimLiveCount("stream") == live + 3);
    EXPECT_ERR(hipStreamCreateWithFlags(&s3, 42), hipErrorInvalidValue);

    hipModule_t m = load_module();
    hipFunction_t sleepk = get_fn(m, "rcb_test_sleep"), fill = get_fn(m, "rcb_test_fill_u32");
    uint64_t us = 30000;
    void *sp[] = {&us};

    /* Events time stream work. */
    hipEvent_t e0, e1, nt;
    CHECK(hipEventCreate(&e0));
    CHECK(hipEventCreateWithFlags(&e1, 0));
    CHECK(hipEventCreateWithFlags(&nt, hipEventDisableTiming));
    CHECK(hipEventQuery(e0)); /* never recorded: complete */
    CHECK(hipEventRecord(e0, s1));
    CHECK(hipModuleLaunchKernel(sleepk, 1, 1, 1, 1, 1, 1, 0, s1, sp, NULL));
    CHECK(hipEventRecord(e1, s1));
    CHECK(hipEventRecord(nt, s1));
    EXPECT_ERR(hipEventQuery(e1), hipErrorNotReady);
    float ms = 0;
    EXPECT_ERR(hipEventElapsedTime(&ms, e0, e1), hipErrorNotReady);
    CHECK(hipEventSynchronize(e1));
    CHECK(hipEventQuery(e1));
    CHECK(hipEventElapsedTime(&ms, e0, e1));
    EXPECT(ms >= 25.0f && ms < 2000.0f);
    EXPECT_ERR(hipEventElapsedTime(&ms, e0, nt), hipErrorInvalidHandle);

    /* Cross-stream ordering with hipStreamWaitEvent: s2 must see s1's fill. */
    uint32_t *buf, host[4];
    CHECK(hipMalloc((void **)&buf, 16));
    CHECK(hipModuleLaunchKernel(sleepk, 1, 1, 1, 1, 1, 1, 0, s1, sp, NULL));
    launch_fill(fill, buf, 11, 4, s1);
    CHECK(hipEventRecord(e0, s1));
    CHECK(hipStreamWaitEvent(s2, e0, 0));
    CHECK(hipMemcpyAsync(host, buf, 16, hipMemcpyDeviceToHost, s2));
    CHECK(hipStreamSynchronize(s2));
    expect_u32(host, 4, 11);

    /* The legacy NULL stream waits for blocking streams (s3) but not non-blocking ones. */
    CHECK(hipModuleLaunchKernel(sleepk, 1, 1, 1, 1, 1, 1, 0, s3, sp, NULL));
    launch_fill(fill, buf, 12, 4, s3);
    CHECK(hipMemcpy(host, buf, 16, hipMemcpyDeviceToHost));
    expect_u32(host, 4, 12);
    CHECK(hipModuleLaunchKernel(sleepk, 1, 1, 1, 1, 1, 1, 0, s1, sp, NULL));
    CHECK(hipStreamSynchronize(NULL));
    EXPECT_ERR(hipStreamQuery(s1), hipErrorNotReady);
    CHECK(hipDeviceSynchronize());
    CHECK(hipStreamQuery(s1));

    /* Sticky errors reach hipDeviceSynchronize once. */
    uint64_t big = 1000;
    uint32_t val = 1;
    void *oob[] = {&buf, &val, &big};
    CHECK(hipModuleLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s2, oob, NULL));
    EXPECT_ERR(hipDeviceSynchronize(), hipErrorIllegalAddress);
    CHECK(hipDeviceSynchronize());

    /* Destroyed and foreign handles. */
    CHECK(hipStreamDestroy(s3));
    EXPECT_ERR(hipStreamQuery(s3), hipErrorInvalidHandle);
    EXPECT_ERR(hipStreamDestroy(s3), hipErrorInvalidHandle);
    EXPECT_ERR(hipStreamSynchronize((hipStream_t)(uintptr_t)0xdead0), hipErrorInvalidHandle);
    EXPECT_ERR(hipMemsetAsync(buf, 0, 4, (hipStream_t)(uintptr_t)0xdead0), hipErrorInvalidHandle);
    CHECK(hipEventDestroy(nt));
    EXPECT_ERR(hipEventQuery(nt), hipErrorInvalidHandle);
    EXPECT(strcmp(hipGetErrorName(hipErrorInvalidHandle), "hipErrorInvalidHandle") == 0);
    EXPECT(strlen(hipGetErrorString(hipErrorIllegalAddress)) > 0);

    CHECK(hipEventDestroy(e0)); CHECK(hipEventDestroy(e1));
    CHECK(hipStreamDestroy(s1)); CHECK(hipStreamDestroy(s2));

    /* A destroyed stream's worker thread has ended when the destroy returns (its thread-local
     * memory is freed then, not at some later moment a leak checker could see). */
    int before = threads();
    hipStream_t s4;
    CHECK(hipStreamCreate(&s4));
    EXPECT(threads() == before + 1);
    CHECK(hipStreamDestroy(s4));
    EXPECT(threads() == before);
    CHECK(hipFree(buf));
    CHECK(hipModuleUnload(m));
    EXPECT(hipsimLiveCount("stream") == live);
    PASS();
}
