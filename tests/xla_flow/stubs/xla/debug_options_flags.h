// Test stand-in for XLA's flag access (see ../README.md): the process's flags (XLA_FLAGS) are
// `xla::process_flags_for_test`, --xla_gpu_rocm_cmdbuf_profiler on unless a test changes them,
// and `xla::flag_reads_for_test` counts the reads. As XLA's, the first read parses the XLA_FLAGS
// variable, once: the series' boolean flags it names (`--name`, `--name=true|false`) are set on
// `process_flags_for_test` then. Included once per target namespace by
// profiler.cpp; it undefines the guard between them.
#ifndef XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_
#define XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_

#include <cstdlib>
#include <sstream>
#include <string>

#include "xla/xla.pb.h"

namespace xla {

inline DebugOptions process_flags_for_test = [] {
  DebugOptions flags;
  flags.rocm_cmdbuf_profiler = true;
  return flags;
}();
inline int flag_reads_for_test = 0;

inline void ParseXlaFlagsForTest(DebugOptions& flags) {
  const char* env = std::getenv("XLA_FLAGS");
  std::istringstream words(env == nullptr ? "" : env);
  for (std::string word; words >> word;) {
    bool value = true;
    if (word.size() > 5 && word.compare(word.size() - 5, 5, "=true") == 0) {
      word.resize(word.size() - 5);
    } else if (word.size() > 6 && word.compare(word.size() - 6, 6, "=false") == 0) {
      word.resize(word.size() - 6);
      value = false;
    }
    if (word == "--xla_gpu_rocm_cmdbuf") flags.set_xla_gpu_rocm_cmdbuf(value);
    if (word == "--xla_gpu_rocm_cmdbuf_update_in_place") flags.set_xla_gpu_rocm_cmdbuf_update_in_place(value);
    if (word == "--xla_gpu_rocm_cmdbuf_trace_cache") flags.set_xla_gpu_rocm_cmdbuf_trace_cache(value);
    if (word == "--xla_gpu_rocm_cmdbuf_flatten_traced") flags.set_xla_gpu_rocm_cmdbuf_flatten_traced(value);
    if (word == "--xla_gpu_rocm_cmdbuf_stream_cache") flags.set_xla_gpu_rocm_cmdbuf_stream_cache(value);
    if (word == "--xla_gpu_rocm_cmdbuf_profiler") flags.set_xla_gpu_rocm_cmdbuf_profiler(value);
  }
}

inline DebugOptions GetDebugOptionsFromFlags() {
  static const bool parsed = (ParseXlaFlagsForTest(process_flags_for_test), true);
  (void)parsed;
  ++flag_reads_for_test;
  return process_flags_for_test;
}

}  // namespace xla

#endif  // XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_
