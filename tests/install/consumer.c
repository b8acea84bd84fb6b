/* A C11 program built as a pkg-config user builds it, against an installed PREFIX (run.sh):
 *   cc -std=c11 consumer.c $(pkg-config --cflags --libs rocm_cmdbuf) -D__HIP_PLATFORM_AMD__ -lamdhip64
 * with RCB_EXPECTED_VERSION defined as the string `pkg-config --modversion rocm_cmdbuf` prints.
 * Run on the software GPU: RCB_BACKEND=hip, RCB_HIP_LIBRARY=the hipsim file the program loaded.
 * Checks that the installed library, its header and its .pc name one version; records
 * fill(x = 2) -> axpy(y += 3x) with hipsim's built-in kernels, launches it, moves y and patches
 * the recorded address in place, launches again, and checks device memory after each launch.
 * Exits 0 when every check holds. */
#include <hip/hip_runtime_api.h>
#include <rocm_cmdbuf.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define HEADER_VERSION STR(RCB_VERSION_MAJOR) "." STR(RCB_VERSION_MINOR) "." STR(RCB_VERSION_PATCH)

#define HIP(call)                                                                       \
    do {                                                                                \
        hipError_t e_ = (call);                                                         \
        if (e_ != hipSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: HIP error %d\n", __FILE__, __LINE__, #call, (int)e_); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define RCB(call)                                                                           \
    do {                                                                                    \
        rcb_status s_ = (call);                                                             \
        if (s_ != RCB_OK) {                                                                 \
            char m_[512];                                                                   \
            rcb_last_error_message(m_, sizeof m_);                                          \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, rcb_status_str(s_), m_); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

enum { N = 64, BYTES = N * 4 };
static int failures = 0;

static uint64_t dptr(void *p) { return (uint64_t)(uintptr_t)p; }

static void expect(void *dev, float want, const char *what) {
    float host[N];
    HIP(hipMemcpy(host, dev, BYTES, hipMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        if (host[i] != want) {
            fprintf(stderr, "%s[%d] = %g, want %g\n", what, i, (double)host[i], (double)want);
            failures++;
            return;
        }
    }
}

int main(void) {
    if (strcmp(rcb_version(), RCB_EXPECTED_VERSION) != 0 || strcmp(rcb_version(), HEADER_VERSION) != 0) {
        fprintf(stderr, "versions differ: library %s, header %s, pkg-config %s\n", rcb_version(), HEADER_VERSION,
                RCB_EXPECTED_VERSION);
        return 1;
    }
    hipModule_t module;
    hipFunction_t fill, axpy;
    hipStream_t stream;
    HIP(hipModuleLoadData(&module, "hipsim"));
    HIP(hipModuleGetFunction(&fill, module, "rcb_test_fill_u32"));
    HIP(hipModuleGetFunction(&axpy, module, "rcb_test_axpy_f32"));
    HIP(hipStreamCreate(&stream));
    float ones[N];
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    void *x, *y, *y2;
    HIP(hipMalloc(&x, BYTES));
    HIP(hipMalloc(&y, BYTES));
    HIP(hipMalloc(&y2, BYTES));
    HIP(hipMemcpy(y, ones, BYTES, hipMemcpyHostToDevice));

    rcb_cmdbuf *cb;
    RCB(rcb_cmdbuf_new(0, &cb));
    rcb_allocation table[2] = {{dptr(x), BYTES}, {dptr(y), BYTES}};
    RCB(rcb_cmdbuf_set_allocations(cb, table, 2));
    uint64_t px = dptr(x), py = dptr(y), n = N;
    float two = 2.0f, a = 3.0f;
    uint32_t two_bits;
    memcpy(&two_bits, &two, 4);
    rcb_kernel_arg fill_args[3] = {{&px, 8, RCB_ARG_DEVICE_PTR}, {&two_bits, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    rcb_kernel_arg axpy_args[4] = {
        {&py, 8, RCB_ARG_DEVICE_PTR}, {&px, 8, RCB_ARG_DEVICE_PTR}, {&a, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    /* A sized struct starts with its size (the rule at the top of rocm_cmdbuf.h). */
    rcb_kernel_launch fill_launch = {.struct_size = sizeof fill_launch, .function = (void *)fill, .grid = {1, 1, 1},
                                     .block = {N, 1, 1}, .args = fill_args, .num_args = 3};
    rcb_kernel_launch axpy_launch = {.struct_size = sizeof axpy_launch, .function = (void *)axpy, .grid = {1, 1, 1},
                                     .block = {N, 1, 1}, .args = axpy_args, .num_args = 4};
    rcb_node fill_node, axpy_node;
    RCB(rcb_cmdbuf_add_kernel(cb, NULL, 0, &fill_launch, &fill_node));
    RCB(rcb_cmdbuf_add_kernel(cb, &fill_node, 1, &axpy_launch, &axpy_node));
    RCB(rcb_cmdbuf_finalize(cb));
    RCB(rcb_cmdbuf_launch(cb, stream));
    HIP(hipStreamSynchronize(stream));
    expect(y, 7.0f, "y = 1 + 3 * 2: y");

    /* The allocator moved y: patch the recorded address, no re-recording. */
    HIP(hipMemcpy(y2, y, BYTES, hipMemcpyDeviceToDevice));
    rcb_allocation_move move = {1, dptr(y2)};
    rcb_update_report report = {.struct_size = sizeof report};
    RCB(rcb_cmdbuf_move_allocations(cb, &move, 1, &report));
    if (report.patched_sites != 1 || report.updated_nodes != 1 || report.needs_rerecord != 0) {
        fprintf(stderr, "move of y: %llu sites, %llu nodes, needs_rerecord %u (want 1, 1, 0)\n",
                (unsigned long long)report.patched_sites, (unsigned long long)report.updated_nodes,
                (unsigned)report.needs_rerecord);
        failures++;
    }
    RCB(rcb_cmdbuf_launch(cb, stream));
    HIP(hipStreamSynchronize(stream));
    expect(y2, 13.0f, "y2 = 7 + 3 * 2: y2");
    expect(y, 7.0f, "old y written after the move: y");

    RCB(rcb_cmdbuf_free(cb));
    HIP(hipFree(x));
    HIP(hipFree(y));
    HIP(hipFree(y2));
    HIP(hipStreamDestroy(stream));
    HIP(hipModuleUnload(module));
    printf("pkg-config consumer (C, rocm_cmdbuf %s): %s\n", rcb_version(), failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
