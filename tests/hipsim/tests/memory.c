/* Device memory model: allocation, copies of every kind, memsets, host memory, bounds. */
#include "check.h"

int main(void) {
    enum { N = 1000 };
    uint32_t host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (uint32_t)i * 7u;

    uint64_t allocs = hipsimLiveCount("alloc");
    void *a, *b;
    CHECK(hipMalloc(&a, sizeof host));
    CHECK(hipMalloc(&b, sizeof host));
    EXPECT(((uintptr_t)a & 255) == 0 && a != b);
    EXPECT(hipsimLiveCount("alloc") == allocs + 2);

    /* Every copy kind, including hipMemcpyDefault inferring both sides. */
    CHECK(hipMemcpy(a, host, sizeof host, hipMemcpyHostToDevice));
    CHECK(hipMemcpy(b, a, sizeof host, hipMemcpyDeviceToDevice));
    memset(back, 0, sizeof back);
    CHECK(hipMemcpy(back, b, sizeof host, hipMemcpyDeviceToHost));
    EXPECT(memcmp(host, back, sizeof host) == 0);
    CHECK(hipMemcpyHtoD(b, host + 10, 40));
    CHECK(hipMemcpyDtoD(a, b, 40));
    memset(back, 0, sizeof back);
    CHECK(hipMemcpyDtoH(back, a, 40));
    EXPECT(memcmp(back, host + 10, 40) == 0);
    CHECK(hipMemcpy(a, host, sizeof host, hipMemcpyDefault));
    memset(back, 0, sizeof back);
    CHECK(hipMemcpy(back, a, sizeof host, hipMemcpyDefault));
    EXPECT(memcmp(host, back, sizeof host) == 0);

    /* Memsets: bytes, 32-bit words, async on a stream. */
    CHECK(hipMemset(a, 0xAB, sizeof host));
    CHECK(hipMemcpy(back, a, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(back, N, 0xABABABABu);
    CHECK(hipMemsetD32(a, 0x12345678, N));
    CHECK(hipMemcpy(back, a, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(back, N, 0x12345678u);
    CHECK(hipMemsetD8(a, 0x01, 4));
    CHECK(hipMemcpy(back, a, 8, hipMemcpyDeviceToHost));
    EXPECT(back[0] == 0x01010101u && back[1] == 0x12345678u);
    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    CHECK(hipMemsetD32Async(b, 7, N, s));
    CHECK(hipMemcpyAsync(a, b, sizeof host, hipMemcpyDeviceToDevice, s));
    CHECK(hipMemsetAsync(b, 0, sizeof host, s));
    CHECK(hipMemcpyDtoDAsync(b, a, 16, s));
    CHECK(hipMemcpyAsync(back, b, sizeof host, hipMemcpyDeviceToHost, s));
    CHECK(hipStreamSynchronize(s));
    expect_u32(back, 4, 7);
    expect_u32(back + 4, N - 4, 0);

    /* Out-of-bounds, freed and foreign addresses: errors, never crashes. */
    EXPECT_ERR(hipMemcpy(back, (char *)a + sizeof host - 4, 8, hipMemcpyDeviceToHost), hipErrorIllegalAddress);
    EXPECT_ERR(hipMemset((char *)a + sizeof host, 0, 1), hipErrorIllegalAddress);
    EXPECT_ERR(hipMemcpy(host, back, 4, hipMemcpyHostToDevice), hipErrorIllegalAddress); /* unregistered as device */
    EXPECT_ERR(hipMemcpy(back, a, 4, (hipMemcpyKind)9), hipErrorInvalidValue);
    CHECK(hipFree(b));
    EXPECT_ERR(hipMemcpy(back, b, 4, hipMemcpyDeviceToHost), hipErrorIllegalAddress);
    EXPECT_ERR(hipFree(b), hipErrorInvalidValue);
    CHECK(hipMemcpyAsync(back, b, 4, hipMemcpyDeviceToHost, s)); /* async: sticky error */
    EXPECT_ERR(hipStreamSynchronize(s), hipErrorIllegalAddress);
    CHECK(hipStreamSynchronize(s));
    CHECK(hipFree(NULL));

    /* Allocation limits. */
    void *huge;
    EXPECT_ERR(hipMalloc(&huge, (size_t)1 << 40), hipErrorOutOfMemory);
    void *zero = (void *)1;
    CHECK(hipMalloc(&zero, 0));
    EXPECT(zero == NULL);
    EXPECT_ERR(hipMalloc(NULL, 16), hipErrorInvalidValue);

    /* Pinned host memory is real host memory that device work can touch. */
    uint32_t *pinned;
    CHECK(hipHostMalloc((void **)&pinned, sizeof host, 0));
    pinned[3] = 99;
    hipModule_t m = load_module();
    launch_fill(get_fn(m, "rcb_test_fill_u32"), pinned, 5, 2, s);
    CHECK(hipStreamSynchronize(s));
    EXPECT(pinned[0] == 5 && pinned[1] == 5 && pinned[3] == 99);
    void *dp;
    CHECK(hipHostGetDevicePointer(&dp, pinned, 0));
    EXPECT(dp == pinned);
    CHECK(hipMemcpy(a, pinned, 16, hipMemcpyHostToDevice));
    CHECK(hipHostFree(pinned));
    /* The device can no longer reach it. */
    launch_fill(get_fn(m, "rcb_test_fill_u32"), pinned, 5, 2, s);
    EXPECT_ERR(hipStreamSynchronize(s), hipErrorIllegalAddress);

    /* Per-thread current device and per-device address ranges. */
    int dev = -1, count = 0;
    CHECK(hipGetDeviceCount(&count));
    EXPECT(count == 2);
    CHECK(hipSetDevice(1));
    CHECK(hipGetDevice(&dev));
    EXPECT(dev == 1);
    void *d1;
    CHECK(hipMalloc(&d1, 64));
    EXPECT(d1 != a);
    CHECK(hipMemcpy(d1, a, 16, hipMemcpyDeviceToDevice)); /* peer copy */
    CHECK(hipFree(d1));
    EXPECT_ERR(hipSetDevice(2), hipErrorInvalidDevice);
    CHECK(hipSetDevice(0));

    CHECK(hipFree(a));
    CHECK(hipStreamDestroy(s));
    CHECK(hipModuleUnload(m));
    EXPECT(hipsimLiveCount("alloc") == allocs);
    PASS();
}
