/* Modules and the built-in kernels, with both argument styles. */
#include "check.h"

enum { N = 4096 };

static void run_extra(hipFunction_t f, void *buf, size_t size, int size_first, hipStream_t s, hipError_t want) {
    void *extra_ps[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
    void *extra_sp[] = {HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_END};
    EXPECT_ERR(hipModuleLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, NULL, size_first ? extra_sp : extra_ps), want);
}

int main(void) {
    hipModule_t m;
    EXPECT_ERR(hipModuleLoadData(&m, "not-an-image"), hipErrorInvalidImage);
    m = load_module();
    hipFunction_t f;
    EXPECT_ERR(hipModuleGetFunction(&f, m, "no_such_kernel"), hipErrorNotFound);
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32"), axpy = get_fn(m, "rcb_test_axpy_f32");
    hipFunction_t add = get_fn(m, "rcb_test_add_f32"), copy = get_fn(m, "rcb_test_copy_u8");
    hipFunction_t sleepk = get_fn(m, "rcb_test_sleep");
    EXPECT(get_fn(m, "rcb_test_fill_u32") == fill);

    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    float *x, *y, *z;
    CHECK(hipMalloc((void **)&x, N * 4));
    CHECK(hipMalloc((void **)&y, N * 4));
    CHECK(hipMalloc((void **)&z, N * 4));
    static float hx[N], hy[N], out[N];
    for (int i = 0; i < N; i++) { hx[i] = (float)i; hy[i] = 1.0f; }
    CHECK(hipMemcpy(x, hx, sizeof hx, hipMemcpyHostToDevice));
    CHECK(hipMemcpy(y, hy, sizeof hy, hipMemcpyHostToDevice));

    /* kernelParams style. */
    float a = 2.0f;
    uint64_t n = N;
    void *axpy_params[] = {&y, &x, &a, &n};
    CHECK(hipModuleLaunchKernel(axpy, 16, 1, 1, 256, 1, 1, 0, s, axpy_params, NULL));
    void *add_params[] = {&z, &x, &y, &n};
    CHECK(hipModuleLaunchKernel(add, 16, 1, 1, 256, 1, 1, 0, s, add_params, NULL));
    CHECK(hipMemcpyAsync(out, z, sizeof out, hipMemcpyDeviceToHost, s));
    CHECK(hipStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(out[i] == (float)i + (1.0f + 2.0f * (float)i));

    /* extra style, both key orders; packed size without tail padding. */
    axpy_args_t aa = {y, x, -1.0f, 0, N};
    run_extra(axpy, &aa, 32, 0, s, hipSuccess);
    run_extra(axpy, &aa, 32, 1, s, hipSuccess);
    CHECK(hipMemcpyAsync(out, y, sizeof out, hipMemcpyDeviceToHost, s));
    CHECK(hipStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(out[i] == 1.0f);
    fill_args_t fa = {z, 0xCAFEu, 0, N};
    run_extra(fill, &fa, 24, 0, s, hipSuccess);
    run_extra(fill, &fa, 20, 0, s, hipErrorInvalidValue); /* smaller than the parameters */
    struct { void *d; const void *s; uint64_t n; } ca = {x, z, 8};
    run_extra(copy, &ca, 24, 1, s, hipSuccess);
    uint32_t got[N];
    CHECK(hipMemcpyAsync(got, x, sizeof got, hipMemcpyDeviceToHost, s));
    CHECK(hipStreamSynchronize(s));
    expect_u32(got, 2, 0xCAFEu);
    EXPECT(((float *)got)[2] == 2.0f);

    /* Both styles at once, neither, and bad launch configurations are rejected. */
    EXPECT_ERR(hipModuleLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, axpy_params, (void **)axpy_params), hipErrorInvalidValue);
    EXPECT_ERR(hipModuleLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), hipErrorInvalidValue);
    EXPECT_ERR(hipModuleLaunchKernel(fill, 0, 1, 1, 1, 1, 1, 0, s, axpy_params, NULL), hipErrorInvalidValue);
    EXPECT_ERR(hipModuleLaunchKernel((hipFunction_t)(uintptr_t)0x1234, 1, 1, 1, 1, 1, 1, 0, s, axpy_params, NULL), hipErrorInvalidHandle);

    /* Out-of-range kernel access is a sticky illegal address on the stream. */
    uint64_t too_many = N + 1;
    void *oob[] = {&z, &fa.value, &too_many};
    CHECK(hipModuleLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, oob, NULL));
    EXPECT_ERR(hipStreamSynchronize(s), hipErrorIllegalAddress);
    CHECK(hipStreamSynchronize(s));

    /* rcb_test_sleep keeps the stream busy; the null stream runs work inline. */
    uint64_t us = 50000;
    void *sp[] = {&us};
    double t0 = now_ms();
    CHECK(hipModuleLaunchKernel(sleepk, 1, 1, 1, 1, 1, 1, 0, s, sp, NULL));
    EXPECT_ERR(hipStreamQuery(s), hipErrorNotReady);
    CHECK(hipStreamSynchronize(s));
    EXPECT(now_ms() - t0 >= 45.0);
    launch_fill(fill, z, 3, 4, NULL);
    CHECK(hipMemcpy(got, z, 16, hipMemcpyDeviceToHost));
    expect_u32(got, 4, 3);

    /* rcb_test_distance_u64 writes end - begin and reads neither: an end one past z's allocation,
     * and a begin past the end (the difference wraps), are no illegal addresses. */
    hipFunction_t distance = get_fn(m, "rcb_test_distance_u64");
    uint8_t *begin = (uint8_t *)z + 100, *end = (uint8_t *)z + N * 4;
    void *dp[] = {&x, &begin, &end};
    CHECK(hipModuleLaunchKernel(distance, 1, 1, 1, 256, 1, 1, 0, s, dp, NULL));
    void *dp_back[] = {&y, &end, &begin};
    CHECK(hipModuleLaunchKernel(distance, 1, 1, 1, 256, 1, 1, 0, s, dp_back, NULL));
    CHECK(hipStreamSynchronize(s));
    uint64_t d[2];
    CHECK(hipMemcpy(&d[0], x, 8, hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(&d[1], y, 8, hipMemcpyDeviceToHost));
    EXPECT(d[0] == N * 4 - 100);
    EXPECT(d[1] == (uint64_t)0 - (N * 4 - 100));

    /* rcb_test_indirect_fill_u32 fills at the address stored in device memory, in no argument. */
    hipFunction_t indirect = get_fn(m, "rcb_test_indirect_fill_u32");
    uint32_t *target = (uint32_t *)z + 8;
    CHECK(hipMemcpy(x, &target, 8, hipMemcpyHostToDevice));
    uint32_t seven = 7;
    uint64_t four = 4;
    void *ip[] = {&x, &seven, &four};
    CHECK(hipModuleLaunchKernel(indirect, 1, 1, 1, 64, 1, 1, 0, s, ip, NULL));
    CHECK(hipStreamSynchronize(s));
    uint32_t around[6];
    CHECK(hipMemcpy(around, (uint32_t *)z + 7, sizeof around, hipMemcpyDeviceToHost));
    EXPECT(around[0] != 7 && around[1] == 7 && around[4] == 7 && around[5] != 7);

    /* Names: a function's registered name; null for anything else and from ByPtr (no host stubs). */
    EXPECT(strcmp(hipKernelNameRef(indirect), "rcb_test_indirect_fill_u32") == 0);
    EXPECT(strcmp(hipKernelNameRef(fill), "rcb_test_fill_u32") == 0);
    EXPECT(hipKernelNameRef((hipFunction_t)x) == NULL);
    EXPECT(hipKernelNameRefByPtr((const void *)fill, NULL) == NULL);

    CHECK(hipModuleUnload(m));
    EXPECT(hipKernelNameRef(fill) == NULL);
    EXPECT_ERR(hipModuleLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, oob, NULL), hipErrorInvalidHandle);
    CHECK(hipFree(x)); CHECK(hipFree(y)); CHECK(hipFree(z));
    CHECK(hipStreamDestroy(s));
    PASS();
}
