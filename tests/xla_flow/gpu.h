// The xla_flow program's own access to the GPU, outside the library: memory, the test kernels,
// a stream, and kernel launches for stream capture. The runtime is the one the library uses,
// chosen by RCB_BACKEND: `hip` (default; the software GPU, dlopen'ed from XLA_FLOW_HIP, the same
// file the library is pointed at with RCB_HIP_LIBRARY so both share one instance) or `cuda`
// (libcuda.so.1, the test kernels' PTX from RCB_TEST_PTX). Failures stop the program.
#ifndef XLA_FLOW_GPU_H
#define XLA_FLOW_GPU_H

#include <dlfcn.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"

class Gpu {
 public:
  Gpu() {
    const char* backend = std::getenv("RCB_BACKEND");
    cuda_ = backend != nullptr && std::strcmp(backend, "cuda") == 0;
    if (cuda_) {
      lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
      if (lib_ == nullptr) Skip("no libcuda.so.1");
      int (*init)(unsigned) = Sym<int (*)(unsigned)>("cuInit");
      if (init(0) != 0) Skip("cuInit failed (no GPU)");
      int dev = 0;
      void* ctx = nullptr;
      Check(Sym<int (*)(int*, int)>("cuDeviceGet")(&dev, 0), "cuDeviceGet");
      Check(Sym<int (*)(void**, int)>("cuDevicePrimaryCtxRetain")(&ctx, dev), "cuDevicePrimaryCtxRetain");
      Check(Sym<int (*)(void*)>("cuCtxSetCurrent")(ctx), "cuCtxSetCurrent");
      const char* ptx_path = std::getenv("RCB_TEST_PTX");
      if (ptx_path == nullptr) Fail("RCB_TEST_PTX is not set");
      std::ifstream in(ptx_path);
      std::stringstream ptx;
      ptx << in.rdbuf();
      std::string text = ptx.str();
      Check(Sym<int (*)(void**, const void*)>("cuModuleLoadData")(&module_, text.c_str()), "cuModuleLoadData");
      Check(Sym<int (*)(void**, unsigned)>("cuStreamCreate")(&stream_, 0), "cuStreamCreate");
    } else {
      const char* path = std::getenv("XLA_FLOW_HIP");
      if (path == nullptr) Fail("XLA_FLOW_HIP (the software GPU's libamdhip64.so) is not set");
      lib_ = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
      if (lib_ == nullptr) Fail(dlerror());
      Check(Sym<int (*)(int)>("hipSetDevice")(0), "hipSetDevice");
      Check(Sym<int (*)(void**, const void*)>("hipModuleLoadData")(&module_, "hipsim"), "hipModuleLoadData");
      Check(Sym<int (*)(void**)>("hipStreamCreate")(&stream_), "hipStreamCreate");
    }
  }

  bool cuda() const { return cuda_; }
  void* stream() const { return stream_; }

  uint64_t Malloc(size_t bytes) {
    uint64_t p = 0;
    Check(cuda_ ? Sym<int (*)(uint64_t*, size_t)>("cuMemAlloc_v2")(&p, bytes)
                : Sym<int (*)(uint64_t*, size_t)>("hipMalloc")(&p, bytes),
          "malloc");
    return p;
  }
  void Free(uint64_t p) {
    Check(cuda_ ? Sym<int (*)(uint64_t)>("cuMemFree_v2")(p) : Sym<int (*)(uint64_t)>("hipFree")(p), "free");
  }
  void Write(uint64_t dst, const void* src, size_t bytes) {
    Check(cuda_ ? Sym<int (*)(uint64_t, const void*, size_t)>("cuMemcpyHtoD_v2")(dst, src, bytes)
                : Sym<int (*)(uint64_t, const void*, size_t, int)>("hipMemcpy")(dst, src, bytes, 1),
          "copy to device");
  }
  void Read(void* dst, uint64_t src, size_t bytes) {
    Check(cuda_ ? Sym<int (*)(void*, uint64_t, size_t)>("cuMemcpyDtoH_v2")(dst, src, bytes)
                : Sym<int (*)(void*, uint64_t, size_t, int)>("hipMemcpy")(dst, src, bytes, 2),
          "copy to host");
  }
  void Sync(void* stream = nullptr) { Check(SyncStatus(stream), "stream synchronize"); }
  // The synchronize's status (0: success), for a flow that goes on either way.
  int SyncStatus(void* stream = nullptr) {
    void* s = stream != nullptr ? stream : stream_;
    return cuda_ ? Sym<int (*)(void*)>("cuStreamSynchronize")(s) : Sym<int (*)(void*)>("hipStreamSynchronize")(s);
  }
  int DeviceCount() {
    int count = 0;
    Check(cuda_ ? Sym<int (*)(int*)>("cuDeviceGetCount")(&count) : Sym<int (*)(int*)>("hipGetDeviceCount")(&count),
          "device count");
    return count;
  }
  // Another stream, kept for the program's life.
  void* NewStream() {
    void* stream = nullptr;
    Check(cuda_ ? Sym<int (*)(void**, unsigned)>("cuStreamCreate")(&stream, 0)
                : Sym<int (*)(void**)>("hipStreamCreate")(&stream),
          "stream create");
    return stream;
  }
  // Destroys a stream: the runtime's status.
  int DestroyStream(void* stream) {
    return cuda_ ? Sym<int (*)(void*)>("cuStreamDestroy_v2")(stream) : Sym<int (*)(void*)>("hipStreamDestroy")(stream);
  }
  void* Function(const char* name) {
    void* f = nullptr;
    Check(cuda_ ? Sym<int (*)(void**, void*, const char*)>("cuModuleGetFunction")(&f, module_, name)
                : Sym<int (*)(void**, void*, const char*)>("hipModuleGetFunction")(&f, module_, name),
          name);
    return f;
  }
  // A kernelParams-style launch on the stream (captured when the stream is capturing).
  void Launch(void* f, unsigned grid, unsigned block, void** params, void* stream = nullptr) {
    using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             void*, void**, void**);
    Check(Sym<LaunchFn>(cuda_ ? "cuLaunchKernel" : "hipModuleLaunchKernel")(
              f, grid, 1, 1, block, 1, 1, 0, stream != nullptr ? stream : stream_, params, nullptr),
          "kernel launch");
  }

  // A launch with a packed argument buffer (`extra`: the runtime's BUFFER_POINTER, BUFFER_SIZE
  // and END keys), as rocBLAS and hipBLASLt launch; captured when the stream is capturing.
  void LaunchPacked(void* f, unsigned grid, unsigned block, void* args, size_t size, void* stream = nullptr) {
    using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             void*, void**, void**);
    void* end = reinterpret_cast<void*>(cuda_ ? 0x0 : 0x3);
    void* extra[] = {reinterpret_cast<void*>(0x1), args, reinterpret_cast<void*>(0x2), &size, end};
    Check(Sym<LaunchFn>(cuda_ ? "cuLaunchKernel" : "hipModuleLaunchKernel")(
              f, grid, 1, 1, block, 1, 1, 0, stream != nullptr ? stream : stream_, nullptr, extra),
          "kernel launch (packed arguments)");
  }

  // Events without timing, kept for the program's life; recorded and waited for on streams (a
  // fork or join of a capture when the stream captures).
  void* NewEvent() {
    void* event = nullptr;
    Check(cuda_ ? Sym<int (*)(void**, unsigned)>("cuEventCreate")(&event, 2)
                : Sym<int (*)(void**, unsigned)>("hipEventCreateWithFlags")(&event, 2),
          "event create");
    return event;
  }
  void RecordEvent(void* event, void* stream) {
    Check(cuda_ ? Sym<int (*)(void*, void*)>("cuEventRecord")(event, stream)
                : Sym<int (*)(void*, void*)>("hipEventRecord")(event, stream),
          "event record");
  }
  void WaitEvent(void* stream, void* event) {
    Check(Sym<int (*)(void*, void*, unsigned)>(cuda_ ? "cuStreamWaitEvent" : "hipStreamWaitEvent")(stream, event, 0),
          "stream wait event");
  }

  // The graph a capturing stream records into and the stream's last nodes
  // (cuStreamGetCaptureInfo_v2 / hipStreamGetCaptureInfo_v2).
  struct CaptureInfo {
    void* graph = nullptr;
    std::vector<void*> last;
  };
  CaptureInfo Capturing(void* stream) {
    int status = 0;
    unsigned long long id = 0;
    CaptureInfo info;
    void* const* deps = nullptr;
    size_t n = 0;
    using InfoFn = int (*)(void*, int*, unsigned long long*, void**, void* const**, size_t*);
    Check(Sym<InfoFn>(cuda_ ? "cuStreamGetCaptureInfo_v2" : "hipStreamGetCaptureInfo_v2")(stream, &status, &id,
                                                                                            &info.graph, &deps, &n),
          "stream capture info");
    if (status != 1) Fail("the stream is not capturing");
    info.last.assign(deps, deps + n);
    return info;
  }
  // Makes `last` the capturing stream's last nodes (its next work depends on them).
  void SetCaptureDependencies(void* stream, std::vector<void*> last) {
    using UpdateFn = int (*)(void*, void**, size_t, unsigned);
    Check(Sym<UpdateFn>(cuda_ ? "cuStreamUpdateCaptureDependencies" : "hipStreamUpdateCaptureDependencies")(
              stream, last.data(), last.size(), 1),
          "stream update capture dependencies");
  }
  // An event record (or wait) node added to `graph` after `deps`.
  void* AddEventNode(bool record, void* graph, const std::vector<void*>& deps, void* event) {
    void* node = nullptr;
    const char* name = record ? (cuda_ ? "cuGraphAddEventRecordNode" : "hipGraphAddEventRecordNode")
                              : (cuda_ ? "cuGraphAddEventWaitNode" : "hipGraphAddEventWaitNode");
    Check(Sym<int (*)(void**, void*, void* const*, size_t, void*)>(name)(&node, graph, deps.data(), deps.size(), event),
          name);
    return node;
  }

  // Graph queries, for checks on what a command buffer recorded. Node types are numbered alike
  // by HIP (ROCm 6) and CUDA.
  static constexpr int kKernelNode = 0, kChildNode = 4, kWaitEventNode = 6, kEventRecordNode = 7;
  std::vector<void*> GraphNodes(void* graph) {
    using NodesFn = int (*)(void*, void**, size_t*);
    auto nodes = Sym<NodesFn>(cuda_ ? "cuGraphGetNodes" : "hipGraphGetNodes");
    size_t n = 0;
    Check(nodes(graph, nullptr, &n), "graph nodes");
    std::vector<void*> out(n);
    Check(nodes(graph, out.data(), &n), "graph nodes");
    out.resize(n);
    return out;
  }
  int NodeType(void* node) {
    int type = -1;
    Check(Sym<int (*)(void*, int*)>(cuda_ ? "cuGraphNodeGetType" : "hipGraphNodeGetType")(node, &type), "node type");
    return type;
  }
  void* ChildGraph(void* node) {
    void* graph = nullptr;
    Check(Sym<int (*)(void*, void**)>(cuda_ ? "cuGraphChildGraphNodeGetGraph" : "hipGraphChildGraphNodeGetGraph")(
              node, &graph),
          "child graph");
    return graph;
  }
  // The nodes `node` depends on.
  std::vector<void*> Dependencies(void* node) {
    using DepsFn = int (*)(void*, void**, size_t*);
    auto deps = Sym<DepsFn>(cuda_ ? "cuGraphNodeGetDependencies" : "hipGraphNodeGetDependencies");
    size_t n = 0;
    Check(deps(node, nullptr, &n), "node dependencies");
    std::vector<void*> out(n);
    Check(deps(node, out.data(), &n), "node dependencies");
    out.resize(n);
    return out;
  }

  // What `issue` launches on the stream, captured into a graph, instantiated, launched once on
  // the stream and destroyed, all by the runtime alone: a command buffer made without the
  // library, as XLA's own RocmCommandBuffer makes one. HIP only (the flows that need it run on
  // the software GPU).
  template <class Issue>
  void LaunchCaptured(Issue issue) {
    if (cuda_) Fail("LaunchCaptured is HIP only");
    void* graph = nullptr;
    void* exec = nullptr;
    Check(Sym<int (*)(void*, int)>("hipStreamBeginCapture")(stream_, 0), "hipStreamBeginCapture");
    issue(stream_);
    Check(Sym<int (*)(void*, void**)>("hipStreamEndCapture")(stream_, &graph), "hipStreamEndCapture");
    Check(Sym<int (*)(void**, void*, void*, char*, size_t)>("hipGraphInstantiate")(&exec, graph, nullptr, nullptr, 0),
          "hipGraphInstantiate");
    Check(Sym<int (*)(void*, void*)>("hipGraphLaunch")(exec, stream_), "hipGraphLaunch");
    Sync();
    Check(Sym<int (*)(void*)>("hipGraphExecDestroy")(exec), "hipGraphExecDestroy");
    Check(Sym<int (*)(void*)>("hipGraphDestroy")(graph), "hipGraphDestroy");
  }

  // A HIP export, for a flow that builds graphs with the runtime alone, as XLA's own
  // RocmCommandBuffer does (HIP only).
  template <class F>
  F Hip(const char* name) {
    if (cuda_) Fail("Hip() is HIP only");
    return Sym<F>(name);
  }

  // The software GPU's test hooks (tests/hipsim/README.md); null on CUDA.
  uint64_t CallCount(const char* name) {
    return cuda_ ? 0 : Sym<uint64_t (*)(const char*)>("hipsimGetCallCount")(name);
  }
  bool SetFaults(const char* spec) {
    return !cuda_ && Sym<int (*)(const char*)>("hipsimSetFaults")(spec) == 0;
  }
  bool SetLatency(const char* spec) {
    return !cuda_ && Sym<int (*)(const char*)>("hipsimSetLatency")(spec) == 0;
  }
  uint64_t LiveCount(const char* kind) {
    return cuda_ ? 0 : Sym<uint64_t (*)(const char*)>("hipsimLiveCount")(kind);
  }

  [[noreturn]] static void Fail(const char* what) {
    std::fprintf(stderr, "xla_flow: %s\n", what);
    std::exit(FailureStatus());
  }

 private:
  [[noreturn]] static void Skip(const char* why) {
    // The SKIPPED line of tests/common/mod.rs; ci/gpu-run.sh fails a skip for lack of a GPU.
    std::printf("SKIPPED %s: every check (%s)\n", program_invocation_short_name, why);
    std::exit(0);
  }
  template <class F>
  F Sym(const char* name) {
    void* p = dlsym(lib_, name);
    if (p == nullptr) Fail(name);
    return reinterpret_cast<F>(p);
  }
  void Check(int code, const char* what) {
    if (code != 0) {
      std::fprintf(stderr, "xla_flow: %s failed with %d\n", what, code);
      std::exit(FailureStatus());
    }
  }

  bool cuda_ = false;
  void* lib_ = nullptr;
  void* module_ = nullptr;
  void* stream_ = nullptr;
};

#endif  // XLA_FLOW_GPU_H
