// Test stand-in for XLA's flag access (see ../README.md): the process's flags (XLA_FLAGS) are
// `xla::process_flags_for_test`, --xla_gpu_rocm_cmdbuf_profiler on unless a test changes them,
// and `xla::flag_reads_for_test` counts the reads. Included once per target namespace by
// profiler.cpp; it undefines the guard between them.
#ifndef XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_
#define XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_

#include "xla/xla.pb.h"

namespace xla {

inline DebugOptions process_flags_for_test = [] {
  DebugOptions flags;
  flags.rocm_cmdbuf_profiler = true;
  return flags;
}();
inline int flag_reads_for_test = 0;

inline DebugOptions GetDebugOptionsFromFlags() {
  ++flag_reads_for_test;
  return process_flags_for_test;
}

}  // namespace xla

#endif  // XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_
