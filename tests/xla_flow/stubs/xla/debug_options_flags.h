// Test stand-in for XLA's flag access (see ../README.md): --xla_gpu_rocm_cmdbuf_profiler is set.
// Included once per target namespace; the test undefines the guard between them.
#ifndef XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_
#define XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_

namespace xla {

struct DebugOptions {
  bool xla_gpu_rocm_cmdbuf_profiler() const { return true; }
};

inline DebugOptions GetDebugOptionsFromFlags() { return DebugOptions{}; }

}  // namespace xla

#endif  // XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_
