// Test stand-in for ROCm's hip/hip_runtime.h: the stream types and flags the stream hooks use,
// hipLaunchHostFunc, with which their test keeps a stream busy, and the HIP graph types and
// functions through which rocm_cmdbuf_command_buffer.cc builds the nodes the library refuses (see
// ../../../README.md). The structs have ROCm 6.x's layouts, as the software GPU takes them.
// hipLaunchHostFunc calls the software GPU's (XLA_FLOW_HIP, the file the library loads too),
// hipErrorNotInitialized where there is none; each graph function calls the software GPU's own,
// found among the libraries the process loaded with RTLD_GLOBAL (the ROCM platform's stand-in
// opens XLA_FLOW_HIP so), hipErrorNotSupported where there is none.
#ifndef XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_
#define XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

typedef struct ihipStream_t* hipStream_t;
typedef struct ihipGraph* hipGraph_t;
typedef struct hipGraphNode* hipGraphNode_t;
typedef struct ihipModuleSymbol_t* hipFunction_t;

#define hipStreamDefault 0x00
#define hipStreamNonBlocking 0x01

enum hipError_t { hipSuccess = 0, hipErrorNotInitialized = 3, hipErrorNotSupported = 801 };
typedef void (*hipHostFn_t)(void* userData);

enum hipMemcpyKind { hipMemcpyDeviceToDevice = 3 };

enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize = 8 };

enum hipGraphDebugDotFlags { hipGraphDebugDotFlagsVerbose = 1 << 0 };

struct dim3 {
  uint32_t x, y, z;
  constexpr dim3(uint32_t x_ = 1, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct hipKernelNodeParams {
  dim3 blockDim;
  void** extra;
  void* func;
  dim3 gridDim;
  void** kernelParams;
  unsigned int sharedMemBytes;
};

struct hipMemsetParams {
  void* dst;
  unsigned int elementSize;
  size_t height;
  size_t pitch;
  unsigned int value;
  size_t width;
};

namespace xla_flow_hip {
template <typename... Args>
hipError_t Call(const char* name, Args... args) {
  auto* function = reinterpret_cast<int (*)(Args...)>(dlsym(RTLD_DEFAULT, name));
  return function != nullptr ? static_cast<hipError_t>(function(args...)) : hipErrorNotSupported;
}
}  // namespace xla_flow_hip

inline hipError_t hipGraphCreate(hipGraph_t* graph, unsigned int flags) {
  return xla_flow_hip::Call("hipGraphCreate", graph, flags);
}
inline hipError_t hipGraphDestroy(hipGraph_t graph) {
  return xla_flow_hip::Call("hipGraphDestroy", graph);
}
inline hipError_t hipGraphGetNodes(hipGraph_t graph, hipGraphNode_t* nodes, size_t* count) {
  return xla_flow_hip::Call("hipGraphGetNodes", graph, nodes, count);
}
inline hipError_t hipGraphAddEmptyNode(hipGraphNode_t* node, hipGraph_t graph,
                                       const hipGraphNode_t* deps, size_t ndeps) {
  return xla_flow_hip::Call("hipGraphAddEmptyNode", node, graph, deps, ndeps);
}
inline hipError_t hipGraphAddMemsetNode(hipGraphNode_t* node, hipGraph_t graph,
                                        const hipGraphNode_t* deps, size_t ndeps,
                                        const hipMemsetParams* params) {
  return xla_flow_hip::Call("hipGraphAddMemsetNode", node, graph, deps, ndeps, params);
}
inline hipError_t hipGraphAddMemcpyNode1D(hipGraphNode_t* node, hipGraph_t graph,
                                          const hipGraphNode_t* deps, size_t ndeps, void* dst,
                                          const void* src, size_t count, hipMemcpyKind kind) {
  return xla_flow_hip::Call("hipGraphAddMemcpyNode1D", node, graph, deps, ndeps, dst, src, count,
                            static_cast<int>(kind));
}
inline hipError_t hipGraphAddKernelNode(hipGraphNode_t* node, hipGraph_t graph,
                                        const hipGraphNode_t* deps, size_t ndeps,
                                        const hipKernelNodeParams* params) {
  return xla_flow_hip::Call("hipGraphAddKernelNode", node, graph, deps, ndeps, params);
}
inline hipError_t hipFuncSetAttribute(const void* function, hipFuncAttribute attribute,
                                      int value) {
  return xla_flow_hip::Call("hipFuncSetAttribute", function, static_cast<int>(attribute), value);
}
inline hipError_t hipGraphDebugDotPrint(hipGraph_t graph, const char* path, unsigned int flags) {
  return xla_flow_hip::Call("hipGraphDebugDotPrint", graph, path, flags);
}

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
