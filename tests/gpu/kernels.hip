// The six test kernels for AMD GPUs, with exactly the parameter lists of kernels.cu and of hipsim's
// built-in kernels (tests/hipsim/src/kernels.rs), so the same packed argument blobs drive all three.
//
// build.rs compiles this file with Debian's clang (clang-19, lld-19) into one code object per
// architecture, device code only and without ROCm's headers or device libraries:
//
//     clang-19 -x hip --cuda-device-only --no-gpu-bundle-output --offload-arch=gfx942 \
//         -nogpulib -nogpuinc -O3 -o kernels-gfx942.hsaco tests/gpu/kernels.hip
//
// so the few HIP names used here are spelled with clang's own attributes and AMDGPU builtins.

#include <stdint.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))

// The first index of this thread and the stride of the whole grid, in work-items (CUDA's
// blockIdx.x * blockDim.x + threadIdx.x and gridDim.x * blockDim.x).
static __device__ inline uint64_t first_index() {
    return (uint64_t)__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
}

static __device__ inline uint64_t grid_stride() {
    return __builtin_amdgcn_grid_size_x();
}

// dst[i] = value for i < n.
extern "C" __global__ void rcb_test_fill_u32(uint32_t* dst, uint32_t value, uint64_t n) {
    for (uint64_t i = first_index(); i < n; i += grid_stride()) {
        dst[i] = value;
    }
}

// y[i] += a * x[i] for i < n.
extern "C" __global__ void rcb_test_axpy_f32(float* y, const float* x, float a, uint64_t n) {
    for (uint64_t i = first_index(); i < n; i += grid_stride()) {
        y[i] += a * x[i];
    }
}

// out[i] = x[i] + y[i] for i < n.
extern "C" __global__ void rcb_test_add_f32(float* out, const float* x, const float* y, uint64_t n) {
    for (uint64_t i = first_index(); i < n; i += grid_stride()) {
        out[i] = x[i] + y[i];
    }
}

// dst[i] = src[i] for i < n bytes.
extern "C" __global__ void rcb_test_copy_u8(uint8_t* dst, const uint8_t* src, uint64_t n) {
    for (uint64_t i = first_index(); i < n; i += grid_stride()) {
        dst[i] = src[i];
    }
}

// Keeps the stream busy for about `microseconds` of wall-clock time (every thread spins). The
// steady counter is the GPU's constant-rate clock (s_memrealtime on gfx9, the real-time message
// on gfx11), taken to run at 100 MHz as AMD documents for MI200 and MI300; the rate of the gfx950
// and gfx1100 builds is not known here. The device reports its rate as
// hipDeviceAttributeWallClockRate (kHz; 10017 in the 5.7.1 to 7.2.4 headers, absent from
// 5.2.3's), but the rate is not passed in: the argument list is the one kernels.cu, the software
// GPU's built-in kernel and the C and C++ test programs share, which give microseconds only. On a
// device with another rate every wait scales by 100 MHz / rate; the tests use the sleep to keep a
// stream busy, and a test that needs it busy past a timeout fails visibly when it is shorter.
extern "C" __global__ void rcb_test_sleep(uint64_t microseconds) {
    uint64_t start = __builtin_readsteadycounter();
    while (__builtin_readsteadycounter() - start < microseconds * 100) {
        __builtin_amdgcn_s_sleep(10);
    }
}

// *out = end - begin (wrapping): a range given as two pointers, neither dereferenced, so that a
// pointer's value shows in the results even where nothing may be read (the end of a range one past
// its allocation). One work-item writes it.
extern "C" __global__ void rcb_test_distance_u64(uint64_t* out, const uint8_t* begin, const uint8_t* end) {
    if (first_index() == 0) {
        *out = (uint64_t)(uintptr_t)end - (uint64_t)(uintptr_t)begin;
    }
}
