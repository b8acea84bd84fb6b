// Test stand-in for the generated xla::DebugOptions (see ../README.md): the fields that the
// patch's compiled files read, as plain members a test sets. Included once per target
// namespace by profiler.cpp; it undefines the guard between them.
#ifndef XLA_FLOW_STUB_XLA_PB_H_
#define XLA_FLOW_STUB_XLA_PB_H_

#include <cstdint>
#include <string>

namespace xla {

struct DebugOptions {
  bool rocm_cmdbuf = false;
  bool rocm_cmdbuf_update_in_place = false;
  bool rocm_cmdbuf_trace_cache = false;
  bool rocm_cmdbuf_flatten_traced = false;
  bool rocm_cmdbuf_stream_cache = false;
  bool rocm_cmdbuf_profiler = false;
  int64_t cmd_buffer_trace_cache_size = 16;
  // A message's defaults (XLA's DefaultDebugOptionsIgnoringFlags sets "vmm" and 10000).
  int32_t rocm_cmdbuf_vmm_pool_slots = 0;
  std::string rocm_cmdbuf_vmm_pool_backing;
  int32_t rocm_cmdbuf_vmm_pool_timeout_ms = 0;

  bool xla_gpu_rocm_cmdbuf() const { return rocm_cmdbuf; }
  bool xla_gpu_rocm_cmdbuf_update_in_place() const { return rocm_cmdbuf_update_in_place; }
  bool xla_gpu_rocm_cmdbuf_trace_cache() const { return rocm_cmdbuf_trace_cache; }
  bool xla_gpu_rocm_cmdbuf_flatten_traced() const { return rocm_cmdbuf_flatten_traced; }
  bool xla_gpu_rocm_cmdbuf_stream_cache() const { return rocm_cmdbuf_stream_cache; }
  bool xla_gpu_rocm_cmdbuf_profiler() const { return rocm_cmdbuf_profiler; }
  int64_t xla_cmd_buffer_trace_cache_size() const { return cmd_buffer_trace_cache_size; }
  int32_t xla_gpu_rocm_cmdbuf_vmm_pool_slots() const { return rocm_cmdbuf_vmm_pool_slots; }
  const std::string& xla_gpu_rocm_cmdbuf_vmm_pool_backing() const {
    return rocm_cmdbuf_vmm_pool_backing;
  }
  int32_t xla_gpu_rocm_cmdbuf_vmm_pool_timeout_ms() const { return rocm_cmdbuf_vmm_pool_timeout_ms; }
  // The generated setters a test calls.
  void set_xla_gpu_rocm_cmdbuf(bool value) { rocm_cmdbuf = value; }
  void set_xla_gpu_rocm_cmdbuf_update_in_place(bool value) { rocm_cmdbuf_update_in_place = value; }
  void set_xla_gpu_rocm_cmdbuf_trace_cache(bool value) { rocm_cmdbuf_trace_cache = value; }
  void set_xla_gpu_rocm_cmdbuf_flatten_traced(bool value) { rocm_cmdbuf_flatten_traced = value; }
  void set_xla_gpu_rocm_cmdbuf_stream_cache(bool value) { rocm_cmdbuf_stream_cache = value; }
  void set_xla_gpu_rocm_cmdbuf_profiler(bool value) { rocm_cmdbuf_profiler = value; }
  void set_xla_gpu_rocm_cmdbuf_vmm_pool_slots(int32_t value) { rocm_cmdbuf_vmm_pool_slots = value; }
  void set_xla_gpu_rocm_cmdbuf_vmm_pool_backing(const std::string& value) {
    rocm_cmdbuf_vmm_pool_backing = value;
  }
  void set_xla_gpu_rocm_cmdbuf_vmm_pool_timeout_ms(int32_t value) {
    rocm_cmdbuf_vmm_pool_timeout_ms = value;
  }
};

}  // namespace xla

#endif  // XLA_FLOW_STUB_XLA_PB_H_
