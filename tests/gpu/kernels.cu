// The six test kernels of the GPU test suite, in CUDA C, with exactly the parameter lists of
// hipsim's built-in kernels (tests/hipsim/src/kernels.rs), so the same packed argument blobs
// drive both. extern "C" keeps the names unmangled for cuModuleGetFunction.
//
// Compiled to tests/gpu/kernels.ptx with the command in tests/gpu/README.md.

#include <stdint.h>

// dst[i] = value for i < n.
extern "C" __global__ void rcb_test_fill_u32(uint32_t* dst, uint32_t value, uint64_t n) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        dst[i] = value;
    }
}

// y[i] += a * x[i] for i < n.
extern "C" __global__ void rcb_test_axpy_f32(float* y, const float* x, float a, uint64_t n) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        y[i] += a * x[i];
    }
}

// out[i] = x[i] + y[i] for i < n.
extern "C" __global__ void rcb_test_add_f32(float* out, const float* x, const float* y, uint64_t n) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        out[i] = x[i] + y[i];
    }
}

// dst[i] = src[i] for i < n bytes.
extern "C" __global__ void rcb_test_copy_u8(uint8_t* dst, const uint8_t* src, uint64_t n) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

static __device__ uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Keeps the stream busy for `microseconds` of wall-clock time (every thread spins).
extern "C" __global__ void rcb_test_sleep(uint64_t microseconds) {
    uint64_t start = global_timer_ns();
    while (global_timer_ns() - start < microseconds * 1000) {
        __nanosleep(1000);
    }
}

// *out = end - begin (wrapping): a range given as two pointers, neither dereferenced, so that a
// pointer's value shows in the results even where nothing may be read (the end of a range one past
// its allocation). One thread writes it.
extern "C" __global__ void rcb_test_distance_u64(uint64_t* out, const uint8_t* begin, const uint8_t* end) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *out = (uint64_t)(uintptr_t)end - (uint64_t)(uintptr_t)begin;
    }
}
