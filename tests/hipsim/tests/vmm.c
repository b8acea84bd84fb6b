/* Virtual memory management: aliasing, access control, lifetime rules. */
#include "check.h"

#define MiB ((size_t)1 << 20)

int main(void) {
    uint64_t phys0 = hipsimLiveCount("physical"), res0 = hipsimLiveCount("reservation"), map0 = hipsimLiveCount("mapping");
    /* ROCm >= 5.3 layout of hipMemAllocationProp (the 5.2 header's struct is ordered differently). */
    prop6_t prop;
    memset(&prop, 0, sizeof prop);
    prop.type = hipMemAllocationTypePinned;
    prop.location.type = hipMemLocationTypeDevice;
    prop.location.id = 0;
    size_t gran = 0;
    CHECK(hipMemGetAllocationGranularity(&gran, (const hipMemAllocationProp *)&prop, hipMemAllocationGranularityMinimum));
    EXPECT(gran == 2 * MiB);
    CHECK(hipMemGetAllocationGranularity(&gran, (const hipMemAllocationProp *)&prop, hipMemAllocationGranularityRecommended));
    EXPECT(gran == 2 * MiB);

    hipMemGenericAllocationHandle_t h, h2;
    EXPECT_ERR(hipMemCreate(&h, MiB, (const hipMemAllocationProp *)&prop, 0), hipErrorInvalidValue);
    /* More than the device's 64 GiB: refused without asking the host for it. */
    EXPECT_ERR(hipMemCreate(&h, (size_t)1 << 46, (const hipMemAllocationProp *)&prop, 0), hipErrorOutOfMemory);
    EXPECT(hipsimLiveCount("physical") == phys0);
    CHECK(hipMemCreate(&h, 2 * MiB, (const hipMemAllocationProp *)&prop, 0));
    CHECK(hipMemCreate(&h2, 2 * MiB, (const hipMemAllocationProp *)&prop, 0));
    void *r1, *r2, *r3;
    CHECK(hipMemAddressReserve(&r1, 2 * MiB, 0, NULL, 0));
    CHECK(hipMemAddressReserve(&r2, 2 * MiB, 0, NULL, 0));
    CHECK(hipMemAddressReserve(&r3, 4 * MiB, 0, NULL, 0));
    EXPECT(r1 && r2 && r1 != r2);
    CHECK(hipMemMap(r1, 2 * MiB, 0, h, 0));
    CHECK(hipMemMap(r2, 2 * MiB, 0, h, 0));
    EXPECT_ERR(hipMemMap(r1, 2 * MiB, 0, h2, 0), hipErrorInvalidValue); /* overlap */
    EXPECT(hipsimLiveCount("mapping") == map0 + 2);

    /* No access before hipMemSetAccess, synchronously or from a stream. */
    uint32_t host[64], back[64];
    for (int i = 0; i < 64; i++) host[i] = 0x1000u + (uint32_t)i;
    EXPECT_ERR(hipMemcpy(r1, host, sizeof host, hipMemcpyHostToDevice), hipErrorIllegalAddress);
    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    hipModule_t m = load_module();
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
    launch_fill(fill, r1, 1, 4, s);
    EXPECT_ERR(hipStreamSynchronize(s), hipErrorIllegalAddress);

    hipMemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = hipMemLocationTypeDevice;
    acc.location.id = 0;
    acc.flags = hipMemAccessFlagsProtReadWrite;
    EXPECT_ERR(hipMemSetAccess(r1, MiB, &acc, 1), hipErrorInvalidValue); /* not a whole mapping */
    CHECK(hipMemSetAccess(r1, 2 * MiB, &acc, 1));
    CHECK(hipMemSetAccess(r2, 2 * MiB, &acc, 1));

    /* Two ranges, one handle: the same bytes. */
    CHECK(hipMemcpy((char *)r1 + 4096, host, sizeof host, hipMemcpyHostToDevice));
    CHECK(hipMemcpy(back, (char *)r2 + 4096, sizeof back, hipMemcpyDeviceToHost));
    EXPECT(memcmp(host, back, sizeof host) == 0);
    launch_fill(fill, r2, 0xF00Du, 8, s);
    CHECK(hipStreamSynchronize(s));
    CHECK(hipMemcpy(back, r1, 32, hipMemcpyDeviceToHost));
    expect_u32(back, 8, 0xF00Du);

    /* Access is per device: device 1 was never granted. */
    CHECK(hipSetDevice(1));
    EXPECT_ERR(hipMemcpy(back, r1, 4, hipMemcpyDeviceToHost), hipErrorIllegalAddress);
    CHECK(hipSetDevice(0));

    /* Read-only access refuses writes. */
    acc.flags = hipMemAccessFlagsProtRead;
    CHECK(hipMemSetAccess(r2, 2 * MiB, &acc, 1));
    CHECK(hipMemcpy(back, r2, 4, hipMemcpyDeviceToHost));
    EXPECT_ERR(hipMemset(r2, 0, 4), hipErrorIllegalAddress);
    acc.flags = hipMemAccessFlagsProtReadWrite;

    /* Two handles mapped back to back form one contiguous range. */
    CHECK(hipMemMap(r3, 2 * MiB, 0, h2, 0));
    CHECK(hipMemMap((char *)r3 + 2 * MiB, 2 * MiB, 0, h, 0));
    CHECK(hipMemSetAccess(r3, 4 * MiB, &acc, 1));
    CHECK(hipMemcpy((char *)r3 + 2 * MiB - 128, host, sizeof host, hipMemcpyHostToDevice));
    CHECK(hipMemcpy(back, (char *)r1, 128, hipMemcpyDeviceToHost)); /* second half of the copy landed in h */
    EXPECT(memcmp(back, host + 32, 128) == 0);

    /* Unmap must name exactly a mapped range; release keeps mapped memory alive. */
    EXPECT_ERR(hipMemUnmap(r1, MiB), hipErrorInvalidValue);
    EXPECT_ERR(hipMemUnmap((char *)r1 + MiB, MiB), hipErrorInvalidValue);
    EXPECT_ERR(hipMemAddressFree(r1, 2 * MiB), hipErrorInvalidValue); /* still mapped */
    CHECK(hipMemRelease(h));
    EXPECT_ERR(hipMemRelease(h), hipErrorInvalidValue);
    EXPECT(hipsimLiveCount("physical") == phys0 + 1);
    CHECK(hipMemUnmap(r1, 2 * MiB));
    EXPECT_ERR(hipMemcpy(back, r1, 4, hipMemcpyDeviceToHost), hipErrorIllegalAddress);
    CHECK(hipMemcpy(back, (char *)r2 + 4096, sizeof back, hipMemcpyDeviceToHost));
    EXPECT(memcmp(host, back, sizeof host) == 0);
    EXPECT_ERR(hipMemMap(r1, 2 * MiB, 0, h, 0), hipErrorInvalidValue); /* released handle */
    CHECK(hipMemUnmap(r2, 2 * MiB));
    CHECK(hipMemUnmap((char *)r3 + 2 * MiB, 2 * MiB));
    CHECK(hipMemUnmap(r3, 2 * MiB));
    CHECK(hipMemRelease(h2));
    CHECK(hipMemAddressFree(r1, 2 * MiB));
    CHECK(hipMemAddressFree(r2, 2 * MiB));
    CHECK(hipMemAddressFree(r3, 4 * MiB));
    EXPECT_ERR(hipMemAddressFree(r3, 4 * MiB), hipErrorInvalidValue);
    EXPECT(hipsimLiveCount("physical") == phys0 && hipsimLiveCount("reservation") == res0 && hipsimLiveCount("mapping") == map0);

    prop.location.id = 9;
    EXPECT_ERR(hipMemCreate(&h, 2 * MiB, (const hipMemAllocationProp *)&prop, 0), hipErrorInvalidValue);
    CHECK(hipStreamDestroy(s));
    CHECK(hipModuleUnload(m));
    PASS();
}
