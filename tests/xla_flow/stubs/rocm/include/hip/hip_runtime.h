// Test stand-in for HIP's hip_runtime.h: the stream handle type and the stream flags the series'
// stream hooks and their test name, and hipLaunchHostFunc, which that test uses to keep a stream
// busy, as HIP declares them (see ../../../README.md). hipLaunchHostFunc calls the software GPU's
// (XLA_FLOW_HIP, the file the library loads too); hipErrorNotInitialized where there is none.
#ifndef XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_
#define XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_

#include <dlfcn.h>

#include <cstdlib>

typedef struct ihipStream_t* hipStream_t;

#define hipStreamDefault 0x00
#define hipStreamNonBlocking 0x01

typedef enum hipError_t { hipSuccess = 0, hipErrorNotInitialized = 3 } hipError_t;
typedef void (*hipHostFn_t)(void* userData);

inline hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void* userData) {
  const char* path = std::getenv("XLA_FLOW_HIP");
  void* library = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : nullptr;
  if (library == nullptr) return hipErrorNotInitialized;
  using Launch = int (*)(hipStream_t, hipHostFn_t, void*);
  auto launch = reinterpret_cast<Launch>(dlsym(library, "hipLaunchHostFunc"));
  hipError_t error = launch == nullptr ? hipErrorNotInitialized
                                       : static_cast<hipError_t>(launch(stream, fn, userData));
  dlclose(library);
  return error;
}

#endif  // XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_
