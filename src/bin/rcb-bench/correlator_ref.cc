// The baseline of `rcb-bench correlator`: what XLA's ROCm trace collector does with the same
// events, written after xla/backends/profiler/gpu/rocm_collector.{h,cc} and rocm_tracer_utils.h
// of ROCm/xla at the pinned commit (183fa00cb5, "M" in DESIGN.md's references):
//   - RocmTracerEvent as there: a std::string name, string views, timestamps, ids, a details union;
//   - AddEvent: one mutex; API events emplaced by correlation id into the API or the auxiliary
//     map (a duplicate is dropped), activities appended to a vector per correlation id;
//   - Flush: ApiActivityInfoExchange (every API event with an activity copied out with the first
//     activity's device and stream; every activity of every id copied out with its API event's
//     details), then each event moved into its device's collector (a mutex and a vector per
//     device, found in a node hash map by device id), then the maps cleared.
// The maps are absl::flat_hash_map / absl::node_hash_map as in XLA when Abseil's headers were
// found at build time (RCB_REF_ABSL), std::unordered_map otherwise; rcb_ref_map_name() says
// which. Correlation ids stay 64-bit here (M narrows one of them to 32 bits, which only matters
// past 2^32, and the workload stays below). Logging and the event limits are left out: they are
// off in a default profile.
//
// Two instantiations: Name = std::string (as XLA) and Name = const char* (what a collector
// would keep if the names were interned), so the table can show what the string copies cost.
//
// Built by build.rs for the rcb-bench binary only; called through the extern "C" functions at
// the bottom.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifdef RCB_REF_ABSL
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
template <class K, class V>
using FlatMap = absl::flat_hash_map<K, V>;
template <class K, class V>
using NodeMap = absl::node_hash_map<K, V>;
#else
#include <unordered_map>
template <class K, class V>
using FlatMap = std::unordered_map<K, V>;
template <class K, class V>
using NodeMap = std::unordered_map<K, V>;
#endif

namespace {

// The C layouts of rocm_cmdbuf.h's rcb_api_event and rcb_activity (the bench's input).
struct ApiIn {
  uint64_t correlation_id, start_ns, end_ns, name, thread_id;
  uint32_t kind, flags;
};
struct ActivityIn {
  uint64_t correlation_id, start_ns, end_ns, name, stream_id;
  uint32_t device_id, kind;
};

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
  uint32_t private_segment_size, group_segment_size, workgroup_x, workgroup_y, workgroup_z, grid_x, grid_y,
      grid_z, sgpr_count, arch_vgpr_count;
};
enum class EventType { Unsupported = 0, Kernel, MemcpyH2D, MemcpyD2H, MemcpyD2D, MemcpyP2P, MemcpyOther,
                       MemoryAlloc, MemoryFree, Memset, Synchronization, Generic };
enum class EventSource { Invalid = 0, ApiCallback, Activity };
enum class EventDomain { InvalidDomain = 0, HIP_API, HIP_OPS };
struct SynchronizationDetails {
  int sync_type;
};

template <class Name>
struct Event {
  static constexpr uint32_t kInvalidDeviceId = std::numeric_limits<uint32_t>::max();
  EventType type;
  EventSource source = EventSource::Invalid;
  EventDomain domain;
  Name name;
  std::string_view annotation;
  std::string_view roctx_range;
  uint64_t start_time_ns = 0;
  uint64_t end_time_ns = 0;
  uint32_t device_id = kInvalidDeviceId;
  uint64_t correlation_id = std::numeric_limits<uint64_t>::max();
  uint64_t thread_id = std::numeric_limits<uint64_t>::max();
  uint64_t stream_id = std::numeric_limits<uint64_t>::max();
  union {
    MemcpyDetails memcpy_info;
    MemsetDetails memset_info;
    MemAllocDetails memalloc_info;
    KernelDetails kernel_info;
    SynchronizationDetails synchronization_info;
  };
  Event() : kernel_info{} {}
};

template <class Name>
class PerDeviceCollector {
 public:
  void AddEvent(Event<Name>&& event) {
    std::lock_guard<std::mutex> lock(events_mutex_);
    events_.push_back(std::move(event));
  }
  size_t size() const { return events_.size(); }

 private:
  std::mutex events_mutex_;
  std::vector<Event<Name>> events_;
};

template <class Name>
class Collector {
 public:
  using E = Event<Name>;

  void AddEvent(E&& event, bool is_auxiliary) {
    std::lock_guard<std::mutex> lock(event_maps_mutex_);
    if (event.source == EventSource::ApiCallback) {
      auto& map = is_auxiliary ? auxiliary_api_events_map_ : api_events_map_;
      auto [it, added] = map.emplace(event.correlation_id, std::move(event));
      if (!added) ++dropped_;
    } else if (event.source == EventSource::Activity) {
      auto [it, _] = activity_ops_events_map_.emplace(event.correlation_id, std::vector<E>{});
      it->second.push_back(std::move(event));
    }
  }

  void Flush() {
    std::lock_guard<std::mutex> lock(event_maps_mutex_);
    auto aggregated_events = ApiActivityInfoExchange();
    uint32_t min_device_id = INT32_MAX;
    for (const auto& event : aggregated_events) {
      if (event.device_id < min_device_id) min_device_id = event.device_id;
    }
    for (auto&& event : aggregated_events) {
      auto id = event.device_id - min_device_id;
      if (id < num_gpus_) {
        per_device_collector_[id].AddEvent(std::move(event));
      } else {
        ++dropped_;
      }
    }
    activity_ops_events_map_.clear();
    api_events_map_.clear();
    auxiliary_api_events_map_.clear();
  }

  size_t DeviceEvents(uint32_t id) { return per_device_collector_[id].size(); }

 private:
  static bool KernelInfoEmpty(const KernelDetails& ki) {
    return ki.grid_x == 0 && ki.grid_y == 0 && ki.grid_z == 0 && ki.workgroup_x == 0 && ki.workgroup_y == 0 &&
           ki.workgroup_z == 0 && ki.private_segment_size == 0 && ki.group_segment_size == 0;
  }

  std::vector<E> ApiActivityInfoExchange() {
    std::vector<E> aggregated_events;
    size_t total_activity_events = 0;
    for (const auto& kv : activity_ops_events_map_) total_activity_events += kv.second.size();
    aggregated_events.reserve(api_events_map_.size() + total_activity_events);

    // 1) API events take device and stream from their first activity.
    for (auto& [key, api_event] : api_events_map_) {
      auto iact = activity_ops_events_map_.find(api_event.correlation_id);
      if (iact == activity_ops_events_map_.end() || iact->second.empty()) {
        ++dropped_;
        continue;
      }
      const E& item = iact->second.front();
      api_event.device_id = item.device_id;
      api_event.stream_id = item.stream_id;
      switch (api_event.type) {
        case EventType::Kernel:
          if (KernelInfoEmpty(api_event.kernel_info) && !KernelInfoEmpty(item.kernel_info)) {
            api_event.kernel_info = item.kernel_info;
          }
          aggregated_events.push_back(api_event);
          break;
        case EventType::Memset:
        case EventType::MemoryAlloc:
        case EventType::MemoryFree:
        case EventType::Synchronization:
          aggregated_events.push_back(api_event);
          break;
        case EventType::MemcpyD2H:
        case EventType::MemcpyH2D:
        case EventType::MemcpyD2D:
        case EventType::MemcpyOther:
          api_event.memcpy_info = item.memcpy_info;
          aggregated_events.push_back(api_event);
          break;
        default:
          ++dropped_;
      }
    }

    // 2) Every activity, with the details of its API event.
    for (auto& activity_iter : activity_ops_events_map_) {
      const uint64_t corr_id = activity_iter.first;
      auto& activity_vec = activity_iter.second;
      if (activity_vec.empty()) continue;
      E* api = nullptr;
      auto api_it = api_events_map_.find(corr_id);
      if (api_it != api_events_map_.end()) {
        api = &api_it->second;
      } else {
        auto aux_it = auxiliary_api_events_map_.find(corr_id);
        if (aux_it != auxiliary_api_events_map_.end()) api = &aux_it->second;
      }
      if (api == nullptr) {
        for (auto& activity_event : activity_vec) {
          switch (activity_event.type) {
            case EventType::Kernel:
            case EventType::MemcpyD2H:
            case EventType::MemcpyH2D:
            case EventType::MemcpyD2D:
            case EventType::MemcpyOther:
              aggregated_events.push_back(activity_event);
              break;
            default:
              ++dropped_;
          }
        }
        continue;
      }
      for (auto& activity_event : activity_vec) {
        switch (activity_event.type) {
          case EventType::Kernel:
            if (KernelInfoEmpty(activity_event.kernel_info) && !KernelInfoEmpty(api->kernel_info)) {
              activity_event.kernel_info = api->kernel_info;
            }
            aggregated_events.push_back(activity_event);
            break;
          case EventType::MemcpyD2H:
          case EventType::MemcpyH2D:
          case EventType::MemcpyD2D:
          case EventType::MemcpyOther:
            aggregated_events.push_back(activity_event);
            break;
          case EventType::Memset:
            activity_event.memset_info = api->memset_info;
            aggregated_events.push_back(activity_event);
            break;
          case EventType::MemoryAlloc:
          case EventType::MemoryFree:
          case EventType::Synchronization:
            activity_event.device_id = api->device_id;
            aggregated_events.push_back(activity_event);
            break;
          default:
            ++dropped_;
        }
      }
    }
    return aggregated_events;
  }

  std::mutex event_maps_mutex_;
  FlatMap<uint64_t, E> api_events_map_;
  FlatMap<uint64_t, std::vector<E>> activity_ops_events_map_;
  FlatMap<uint64_t, E> auxiliary_api_events_map_;
  NodeMap<uint32_t, PerDeviceCollector<Name>> per_device_collector_;
  uint32_t num_gpus_ = 8;
  uint64_t dropped_ = 0;
};

// What the tracer's callbacks do before AddEvent: build the event from the runtime's record.
template <class Name>
Name MakeName(uint64_t p);
template <>
std::string MakeName<std::string>(uint64_t p) {
  return std::string(reinterpret_cast<const char*>(p));
}
template <>
const char* MakeName<const char*>(uint64_t p) {
  return reinterpret_cast<const char*>(p);
}

template <class Name>
void AddApi(void* c, const ApiIn* in) {
  Event<Name> e;
  e.type = EventType::Kernel;
  e.source = EventSource::ApiCallback;
  e.domain = EventDomain::HIP_API;
  e.name = MakeName<Name>(in->name);
  e.start_time_ns = in->start_ns;
  e.end_time_ns = in->end_ns;
  e.correlation_id = in->correlation_id;
  e.thread_id = in->thread_id;
  static_cast<Collector<Name>*>(c)->AddEvent(std::move(e), (in->flags & 1) != 0);
}

template <class Name>
void AddActivity(void* c, const ActivityIn* in) {
  Event<Name> e;
  e.type = EventType::Kernel;
  e.source = EventSource::Activity;
  e.domain = EventDomain::HIP_OPS;
  e.name = MakeName<Name>(in->name);
  e.start_time_ns = in->start_ns;
  e.end_time_ns = in->end_ns;
  e.device_id = in->device_id;
  e.correlation_id = in->correlation_id;
  e.stream_id = in->stream_id;
  e.kernel_info.grid_x = 1;
  static_cast<Collector<Name>*>(c)->AddEvent(std::move(e), false);
}

}  // namespace

extern "C" {

const char* rcb_ref_map_name() {
#ifdef RCB_REF_ABSL
  return "absl::flat_hash_map";
#else
  return "std::unordered_map";
#endif
}

// names: 0 = std::string (as XLA), 1 = const char*.
void* rcb_ref_new(int names) {
  if (names == 0) return new Collector<std::string>();
  return new Collector<const char*>();
}

void rcb_ref_free(void* c, int names) {
  if (names == 0) {
    delete static_cast<Collector<std::string>*>(c);
  } else {
    delete static_cast<Collector<const char*>*>(c);
  }
}

void rcb_ref_add_api_event(void* c, int names, const ApiIn* in) {
  if (names == 0) {
    AddApi<std::string>(c, in);
  } else {
    AddApi<const char*>(c, in);
  }
}

void rcb_ref_add_activity(void* c, int names, const ActivityIn* in) {
  if (names == 0) {
    AddActivity<std::string>(c, in);
  } else {
    AddActivity<const char*>(c, in);
  }
}

void rcb_ref_flush(void* c, int names) {
  if (names == 0) {
    static_cast<Collector<std::string>*>(c)->Flush();
  } else {
    static_cast<Collector<const char*>*>(c)->Flush();
  }
}

size_t rcb_ref_device_events(void* c, int names, uint32_t device) {
  if (names == 0) return static_cast<Collector<std::string>*>(c)->DeviceEvents(device);
  return static_cast<Collector<const char*>*>(c)->DeviceEvents(device);
}

}  // extern "C"
