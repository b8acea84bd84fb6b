// A C++17 program built with CMake against an installed PREFIX (CMakeLists.txt: find_package,
// rocm_cmdbuf::rocm_cmdbuf), through the installed C++ wrapper rocm_cmdbuf.hpp, with
// RCB_EXPECTED_VERSION defined as the package's version. Run on the software GPU: RCB_BACKEND=hip,
// RCB_HIP_LIBRARY=the hipsim file the program loaded. The same flow as consumer.c: versions agree;
// fill(x = 2) -> axpy(y += 3x) recorded, launched, y moved and patched in place, launched again;
// device memory checked after each launch. Exits 0 when every check holds.
#include <hip/hip_runtime_api.h>
#include <rocm_cmdbuf.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define STR_(x) #x
#define STR(x) STR_(x)

namespace {

constexpr uint32_t N = 64;
constexpr uint64_t BYTES = N * 4;
int failures = 0;

void Hip(hipError_t e, const char* call) {
  if (e != hipSuccess) {
    std::fprintf(stderr, "%s: HIP error %d\n", call, static_cast<int>(e));
    std::exit(1);
  }
}
#define HIP(call) Hip((call), #call)

void Must(const rcb::Status& s, const char* call) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", call, s.ToString().c_str());
    std::exit(1);
  }
}
#define MUST(call) Must((call), #call)

uint64_t Dptr(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

void Expect(void* dev, float want, const char* what) {
  std::vector<float> host(N);
  HIP(hipMemcpy(host.data(), dev, BYTES, hipMemcpyDeviceToHost));
  for (uint32_t i = 0; i < N; i++) {
    if (host[i] != want) {
      std::fprintf(stderr, "%s[%u] = %g, want %g\n", what, i, static_cast<double>(host[i]), static_cast<double>(want));
      failures++;
      return;
    }
  }
}

}  // namespace

int main() {
  const char* header = STR(RCB_VERSION_MAJOR) "." STR(RCB_VERSION_MINOR) "." STR(RCB_VERSION_PATCH);
  if (std::strcmp(rcb::Version(), RCB_EXPECTED_VERSION) != 0 || std::strcmp(rcb::Version(), header) != 0) {
    std::fprintf(stderr, "versions differ: library %s, header %s, CMake package %s\n", rcb::Version(), header,
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
  void *x, *y, *y2;
  HIP(hipMalloc(&x, BYTES));
  HIP(hipMalloc(&y, BYTES));
  HIP(hipMalloc(&y2, BYTES));
  std::vector<float> ones(N, 1.0f);
  HIP(hipMemcpy(y, ones.data(), BYTES, hipMemcpyHostToDevice));

  {
    rcb::CmdBuf cb;
    MUST(rcb::CmdBuf::Create(0, &cb));
    std::array<rcb_allocation, 2> table{{{Dptr(x), BYTES}, {Dptr(y), BYTES}}};
    MUST(cb.SetAllocations(table));
    uint64_t px = Dptr(x), py = Dptr(y), n = N;
    float two = 2.0f, a = 3.0f;
    uint32_t two_bits;
    std::memcpy(&two_bits, &two, 4);
    rcb_kernel_arg fill_args[] = {{&px, 8, RCB_ARG_DEVICE_PTR}, {&two_bits, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    rcb_kernel_arg axpy_args[] = {
        {&py, 8, RCB_ARG_DEVICE_PTR}, {&px, 8, RCB_ARG_DEVICE_PTR}, {&a, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    // struct_size (the first field) is set by the wrapper.
    rcb_kernel_launch fill_launch = {0, reinterpret_cast<void*>(fill), {1, 1, 1}, {N, 1, 1}, 0, fill_args, 3};
    rcb_kernel_launch axpy_launch = {0, reinterpret_cast<void*>(axpy), {1, 1, 1}, {N, 1, 1}, 0, axpy_args, 4};
    rcb_node fill_node = 0, axpy_node = 0;
    MUST(cb.AddKernel({}, fill_launch, &fill_node));
    MUST(cb.AddKernel({fill_node}, axpy_launch, &axpy_node));
    MUST(cb.Finalize());
    MUST(cb.Launch(stream));
    HIP(hipStreamSynchronize(stream));
    Expect(y, 7.0f, "y = 1 + 3 * 2: y");

    // The allocator moved y: patch the recorded address, no re-recording.
    HIP(hipMemcpy(y2, y, BYTES, hipMemcpyDeviceToDevice));
    rcb_update_report report{};
    MUST(cb.MoveAllocations({rcb_allocation_move{1, Dptr(y2)}}, &report));
    if (report.patched_sites != 1 || report.updated_nodes != 1 || report.needs_rerecord != 0) {
      std::fprintf(stderr, "move of y: %llu sites, %llu nodes, needs_rerecord %u (want 1, 1, 0)\n",
                   static_cast<unsigned long long>(report.patched_sites),
                   static_cast<unsigned long long>(report.updated_nodes), static_cast<unsigned>(report.needs_rerecord));
      failures++;
    }
    MUST(cb.Launch(stream));
    HIP(hipStreamSynchronize(stream));
    Expect(y2, 13.0f, "y2 = 7 + 3 * 2: y2");
    Expect(y, 7.0f, "old y written after the move: y");
  }  // ~CmdBuf frees the command buffer

  HIP(hipFree(x));
  HIP(hipFree(y));
  HIP(hipFree(y2));
  HIP(hipStreamDestroy(stream));
  HIP(hipModuleUnload(module));
  std::printf("CMake consumer (C++, rocm_cmdbuf %s): %s\n", rcb::Version(), failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
