// Test model of the ROCm collector's event record (see ../../../../README.md): the names and
// types the profiler patch reads and writes, and the rest of the record so that a check can
// compare every field. XLA_FLOW_CORRELATION_ID is the correlation id's type of the target.
// Included once per target namespace; the test undefines the guard between them.
#ifndef XLA_FLOW_STUB_ROCM_TRACER_UTILS_H_
#define XLA_FLOW_STUB_ROCM_TRACER_UTILS_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace xla {
namespace profiler {

// The event types, in the collector's numbering (0 is an unsupported event).
enum class RocmTracerEventType {
  Unsupported = 0,
  Kernel,
  MemcpyH2D,
  MemcpyD2H,
  MemcpyD2D,
  MemcpyP2P,
  MemcpyOther,
  MemoryAlloc,
  MemoryFree,
  Memset,
  Synchronization,
  Generic,
};

inline const char* GetRocmTracerEventTypeName(const RocmTracerEventType& type) {
  static const char* const names[] = {"Unsupported", "Kernel",      "MemcpyH2D",  "MemcpyD2H",
                                      "MemcpyD2D",   "MemcpyP2P",   "MemcpyOther", "MemoryAlloc",
                                      "MemoryFree",  "Memset",      "Synchronization", "Generic"};
  size_t i = static_cast<size_t>(type);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

enum class RocmTracerEventSource { Invalid = 0, ApiCallback, Activity };
enum class RocmTracerEventDomain { InvalidDomain = 0, HIP_API, HIP_OPS };
enum class RocmTracerSyncTypes { Unknown = 0, Stream, Event };

// The per-type details; the record holds one of them at a time, in one union.
struct MemcpyDetails {
  size_t num_bytes;
  uint32_t destination;
  bool async;
};
struct MemAllocDetails {
  uint64_t num_bytes;
};
struct MemsetDetails {
  size_t num_bytes;
  bool async;
};
struct KernelDetails {
  uint32_t private_segment_size;
  uint32_t group_segment_size;
  uint32_t workgroup_x;
  uint32_t workgroup_y;
  uint32_t workgroup_z;
  uint32_t grid_x;
  uint32_t grid_y;
  uint32_t grid_z;
  void* func_ptr;
};
struct SynchronizationDetails {
  RocmTracerSyncTypes sync_type;
};

struct RocmTracerEvent {
  static constexpr uint32_t kInvalidDeviceId = std::numeric_limits<uint32_t>::max();
  static constexpr uint64_t kInvalidThreadId = std::numeric_limits<uint64_t>::max();
  static constexpr XLA_FLOW_CORRELATION_ID kInvalidCorrelationId =
      std::numeric_limits<XLA_FLOW_CORRELATION_ID>::max();
  static constexpr uint64_t kInvalidStreamId = std::numeric_limits<uint64_t>::max();

  RocmTracerEventType type;
  RocmTracerEventSource source = RocmTracerEventSource::Invalid;
  RocmTracerEventDomain domain;
  std::string name;
  std::string_view annotation;
  std::string_view roctx_range;
  uint64_t start_time_ns = 0;
  uint64_t end_time_ns = 0;
  uint32_t device_id = kInvalidDeviceId;
  XLA_FLOW_CORRELATION_ID correlation_id = kInvalidCorrelationId;
  uint64_t thread_id = kInvalidThreadId;
  uint64_t stream_id = kInvalidStreamId;
  uint64_t queue_id = 0;
  int64_t scope_range_id = 0;
  union {
    MemcpyDetails memcpy_info;
    MemsetDetails memset_info;
    MemAllocDetails memalloc_info;
    KernelDetails kernel_info;
    SynchronizationDetails synchronization_info;
  };
};

// The collector's limits (0 and UINT64_MAX as the collector reads them).
struct RocmTraceCollectorOptions {
  uint64_t max_callback_api_events;
  uint64_t max_activity_api_events;
  uint64_t max_annotation_strings;
  uint32_t num_gpus;
};

}  // namespace profiler
}  // namespace xla

#endif  // XLA_FLOW_STUB_ROCM_TRACER_UTILS_H_
