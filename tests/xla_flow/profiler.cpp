// Runs the profiler hook of xla-patches/0006 (--xla_gpu_rocm_cmdbuf_profiler) as the patch has
// it: run.sh extracts xla/backends/profiler/gpu/rocm_cmdbuf_correlation.{h,cc} from the patch,
// and they are compiled here against stand-ins of the few XLA headers they include (stubs/),
// once with 64-bit correlation ids (ROCm/xla main) and once with 32-bit ones
// (rocm-jaxlib-v0.11.1).
//
// The hook's output is compared, event by event and field by field, with what XLA's own
// RocmTraceCollectorImpl::ApiActivityInfoExchange gives for the same maps. XlaExchange below is
// this project's reading of that function at both targets (the same there):
//
//   1. For each main API event whose correlation id has activities: the event takes the device
//      and stream of the id's first activity to arrive (the front of the collector's vector),
//      and, if it is a kernel event, that activity's kernel details, if a copy event its copy
//      details; this updates the event in the map. Kernels, sets, allocations, frees,
//      synchronisations and copies are then reported, any other type is dropped with a report.
//      A main API event without activities is left out, without a report.
//   2. For each correlation id with activities: the API event is the main one of that id, as
//      step 1 left it, else the auxiliary one (never updated); none: one report for the id.
//      Each activity then takes, from that event, its kernel details (a kernel), its set
//      details (a set) or its device (an allocation, a free, a synchronisation); a copy keeps
//      its own; any other type is dropped with one report per activity. On main the map's
//      64-bit key is narrowed to 32 bits for this lookup and for the report.
//
// Where the hook deliberately differs: it joins step 2 at the full 64-bit width (an activity
// whose id is past 2^32 finds its own API event, not the one of its low 32 bits) and reports
// the full id, and it emits every activity first, then the API events, in the documented order
// (xla-patches/README.md), where XLA emits API events first in its hash maps' order. So: with
// 64-bit ids the hook equals XlaExchange with a 64-bit step 2, and differs from XLA's own (32-bit
// step 2) only in events and reports of ids past 2^32; with ids below 2^32, and with 32-bit ids,
// it equals XLA's own exactly.
//
// The events: plain launches, graph launches of many kernels under one id whose first activity
// to arrive is neither the earliest nor on the lowest device, copies and sets (API and activity
// types equal or not: a copy API event over a blit kernel), allocations, frees and
// synchronisations on another device than their API event, auxiliary API events alone and
// beside main ones, activities without API event, API events without activities, a duplicate
// API event, every type neither loop handles, and ids past 2^32 that share their low 32 bits
// with others. Also checked: the documented order, the same output from maps filled by four
// threads in another order and iterated in another order, and the fallback (nullopt, XLA's
// loops, counted, the first logged) when the maps hold more than the collector's limits as its
// AddEvent counts them (main API events, HIP_API activities), and none below the numbers it
// does not count (auxiliary API events, HIP_OPS activities).
// Host only: the correlator needs no GPU. The program does not link the library: the hook opens
// it through 0003's loader (rocm_cmdbuf_library.cc, compiled here), as the patched XLA does.
// Exits 0 when every check holds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/log/log.h"
#include "absl/types/span.h"
#include "check.h"
#include "rocm_cmdbuf.hpp"

// ---- The patch's files, once per target ----

#define ROCM_CMDBUF_AVAILABLE 1
#include "xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
#include "xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc"

namespace main_target {
#define XLA_FLOW_CORRELATION_ID uint64_t
#include "xla/debug_options_flags.h"
#include "xla/backends/profiler/gpu/rocm_tracer_utils.h"
#include "xla/backends/profiler/gpu/rocm_cmdbuf_correlation.cc"
#undef XLA_FLOW_CORRELATION_ID
}  // namespace main_target

#undef XLA_FLOW_STUB_DEBUG_OPTIONS_FLAGS_H_
#undef XLA_FLOW_STUB_XLA_PB_H_
#undef XLA_FLOW_STUB_ROCM_TRACER_UTILS_H_
#undef XLA_BACKENDS_PROFILER_GPU_ROCM_CMDBUF_CORRELATION_H_

namespace release_target {
#define XLA_FLOW_CORRELATION_ID uint32_t
#include "xla/debug_options_flags.h"
#include "xla/backends/profiler/gpu/rocm_tracer_utils.h"
#include "xla/backends/profiler/gpu/rocm_cmdbuf_correlation.cc"
#undef XLA_FLOW_CORRELATION_ID
}  // namespace release_target

namespace {

// What one target gives the test.
#define XLA_FLOW_TARGET(Name, ns, label, wide)                                                     \
  struct Name {                                                                                   \
    using Event = ns::xla::profiler::RocmTracerEvent;                                             \
    using Type = ns::xla::profiler::RocmTracerEventType;                                          \
    using Source = ns::xla::profiler::RocmTracerEventSource;                                      \
    using Domain = ns::xla::profiler::RocmTracerEventDomain;                                      \
    using Options = ns::xla::profiler::RocmTraceCollectorOptions;                                 \
    using KernelDetails = ns::xla::profiler::KernelDetails;                                       \
    using MemcpyDetails = ns::xla::profiler::MemcpyDetails;                                       \
    using MemsetDetails = ns::xla::profiler::MemsetDetails;                                       \
    using SyncType = ns::xla::profiler::RocmTracerSyncTypes;                                      \
    using Id = decltype(Event::correlation_id);                                                   \
    static constexpr const char* kName = label;                                                   \
    static constexpr bool kWideIds = wide;                                                        \
    template <typename... A>                                                                      \
    static std::optional<std::vector<Event>> Hook(A&&... a) {                                     \
      return ns::xla::profiler::ApiActivityInfoExchangeWithRocmCmdbuf(std::forward<A>(a)...);     \
    }                                                                                             \
  };
XLA_FLOW_TARGET(MainTarget, main_target, "64-bit ids, ROCm/xla main", true)
XLA_FLOW_TARGET(ReleaseTarget, release_target, "32-bit ids, rocm-jaxlib-v0.11.1", false)
#undef XLA_FLOW_TARGET

struct Dropped {
  std::string reason;
  uint64_t correlation_id;
  bool operator<(const Dropped& o) const { return std::tie(reason, correlation_id) < std::tie(o.reason, o.correlation_id); }
  bool operator==(const Dropped& o) const { return reason == o.reason && correlation_id == o.correlation_id; }
};

// The collector's report texts.
const char* const kMissingMerge = "Missing API-Activity information exchange. Dropped!";
// As the collector has it: no space after the first stop.
const char* const kNoApi = "An event from activity was discarded.Could not find the counterpart HIP API.";
const char* const kDuplicate = "event with duplicate correlation_id was received.";

// ---- RocmTraceCollectorImpl's maps, as AddEvent fills them (no limits) ----

template <typename T, template <typename...> class Map>
class Collector {
 public:
  using Ev = typename T::Event;
  using Id = typename T::Id;

  void AddEvent(Ev&& event, bool is_auxiliary) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (event.source == T::Source::ApiCallback) {
      auto& map = is_auxiliary ? auxiliary_api_events_map_ : api_events_map_;
      if (!map.emplace(event.correlation_id, std::move(event)).second) {
        OnEventsDropped(kDuplicate, event.correlation_id);
      }
    } else if (event.source == T::Source::Activity) {
      activity_ops_events_map_[event.correlation_id].push_back(std::move(event));
    }
  }

  void OnEventsDropped(const std::string& reason, Id correlation_id) { dropped_.push_back({reason, correlation_id}); }

  // The patched ApiActivityInfoExchange's hook.
  std::optional<std::vector<Ev>> Hook(const typename T::Options& options) {
    std::lock_guard<std::mutex> lock(mutex_);
    return T::Hook(options, api_events_map_, auxiliary_api_events_map_, activity_ops_events_map_, *this);
  }

  std::vector<Dropped> dropped_;
  Map<Id, Ev> api_events_map_;
  Map<Id, std::vector<Ev>> activity_ops_events_map_;
  Map<Id, Ev> auxiliary_api_events_map_;

 private:
  std::mutex mutex_;
};

// ---- XLA's exchange, as read at both targets (see the top of this file) ----

template <typename T>
bool IsCopy(typename T::Type t) {
  return t == T::Type::MemcpyD2H || t == T::Type::MemcpyH2D || t == T::Type::MemcpyD2D || t == T::Type::MemcpyOther;
}

template <typename T>
struct Exchanged {
  std::vector<typename T::Event> events;
  std::vector<Dropped> dropped;
};

// `api_events` by value: step 1 writes into the map's events. `narrow`: step 2's lookup and
// report through a 32-bit id, as on main.
template <typename T, typename ApiMap, typename ActivityMap>
Exchanged<T> XlaExchange(ApiMap api_events, const ApiMap& auxiliary, ActivityMap activities, bool narrow) {
  using Ev = typename T::Event;
  using Type = typename T::Type;
  Exchanged<T> out;
  for (auto& entry : api_events) {
    Ev& api = entry.second;
    auto found = activities.find(api.correlation_id);
    if (found == activities.end()) continue;
    const Ev& first = found->second.front();
    api.device_id = first.device_id;
    api.stream_id = first.stream_id;
    if (api.type == Type::Kernel) api.kernel_info = first.kernel_info;
    if (IsCopy<T>(api.type)) api.memcpy_info = first.memcpy_info;
    bool reported = api.type == Type::Kernel || api.type == Type::Memset || api.type == Type::MemoryAlloc ||
                    api.type == Type::MemoryFree || api.type == Type::Synchronization || IsCopy<T>(api.type);
    if (reported) {
      out.events.push_back(api);
    } else {
      out.dropped.push_back({kMissingMerge, api.correlation_id});
    }
  }
  for (auto& entry : activities) {
    if (entry.second.empty()) continue;
    uint64_t id = entry.first;
    if (narrow) id = static_cast<uint32_t>(id);
    const Ev* api = nullptr;
    if (auto it = api_events.find(id); it != api_events.end()) {
      api = &it->second;
    } else if (auto aux = auxiliary.find(id); aux != auxiliary.end()) {
      api = &aux->second;
    }
    if (api == nullptr) {
      out.dropped.push_back({kNoApi, id});
      continue;
    }
    for (Ev activity : entry.second) {
      Type t = activity.type;
      if (t == Type::Kernel) {
        activity.kernel_info = api->kernel_info;
      } else if (t == Type::Memset) {
        activity.memset_info = api->memset_info;
      } else if (t == Type::MemoryAlloc || t == Type::MemoryFree || t == Type::Synchronization) {
        activity.device_id = api->device_id;
      } else if (!IsCopy<T>(t)) {
        out.dropped.push_back({kMissingMerge, activity.correlation_id});
        continue;
      }
      out.events.push_back(activity);
    }
  }
  return out;
}

// ---- Field by field ----

template <typename T>
std::vector<std::pair<const char*, std::string>> Fields(const typename T::Event& e) {
  auto s = [](auto v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  // A bool of the union may hold another member's byte: read it as a byte.
  auto byte = [](const bool& b) {
    unsigned char v;
    std::memcpy(&v, &b, 1);
    return static_cast<int>(v);
  };
  const auto& k = e.kernel_info;
  const auto& c = e.memcpy_info;
  const auto& m = e.memset_info;
  return {{"type", s(static_cast<int>(e.type))},
          {"source", s(static_cast<int>(e.source))},
          {"domain", s(static_cast<int>(e.domain))},
          {"name", e.name},
          {"annotation", std::string(e.annotation)},
          {"roctx_range", std::string(e.roctx_range)},
          {"start_time_ns", s(e.start_time_ns)},
          {"end_time_ns", s(e.end_time_ns)},
          {"device_id", s(e.device_id)},
          {"correlation_id", s(static_cast<uint64_t>(e.correlation_id))},
          {"thread_id", s(e.thread_id)},
          {"stream_id", s(e.stream_id)},
          {"queue_id", s(e.queue_id)},
          {"scope_range_id", s(e.scope_range_id)},
          {"kernel_info.private_segment_size", s(k.private_segment_size)},
          {"kernel_info.group_segment_size", s(k.group_segment_size)},
          {"kernel_info.workgroup_x", s(k.workgroup_x)},
          {"kernel_info.workgroup_y", s(k.workgroup_y)},
          {"kernel_info.workgroup_z", s(k.workgroup_z)},
          {"kernel_info.grid_x", s(k.grid_x)},
          {"kernel_info.grid_y", s(k.grid_y)},
          {"kernel_info.grid_z", s(k.grid_z)},
          {"kernel_info.func_ptr", s(reinterpret_cast<uintptr_t>(k.func_ptr))},
          {"memcpy_info.num_bytes", s(c.num_bytes)},
          {"memcpy_info.destination", s(c.destination)},
          {"memcpy_info.async", s(byte(c.async))},
          {"memset_info.num_bytes", s(m.num_bytes)},
          {"memset_info.async", s(byte(m.async))},
          {"memalloc_info.num_bytes", s(e.memalloc_info.num_bytes)},
          {"synchronization_info.sync_type", s(static_cast<int>(e.synchronization_info.sync_type))}};
}

// Compares two outputs as sets of events (names are unique in the scenarios: each event is
// paired by source and name) and their reports as multisets. Returns the number of differing
// events; prints the first few differences with their fields when `report`.
template <typename T>
size_t Compare(const char* what, const std::vector<typename T::Event>& got, const std::vector<typename T::Event>& want,
               bool report, size_t* compared_fields = nullptr) {
  std::map<std::pair<int, std::string>, const typename T::Event*> a, b;
  for (const auto& e : got) a.emplace(std::make_pair(static_cast<int>(e.source), e.name), &e);
  for (const auto& e : want) b.emplace(std::make_pair(static_cast<int>(e.source), e.name), &e);
  size_t differing = 0, printed = 0;
  auto note = [&](const std::string& line) {
    if (report && printed++ < 8) std::fprintf(stderr, "  %s: %s\n", what, line.c_str());
  };
  for (const auto& [key, e] : a) {
    auto it = b.find(key);
    if (it == b.end()) {
      ++differing;
      note("only the hook has " + key.second);
      continue;
    }
    auto fa = Fields<T>(*e), fb = Fields<T>(*it->second);
    bool same = true;
    for (size_t i = 0; i < fa.size(); ++i) {
      if (compared_fields != nullptr) ++*compared_fields;
      if (fa[i].second != fb[i].second) {
        same = false;
        note(key.second + "." + fa[i].first + ": hook " + fa[i].second + ", XLA " + fb[i].second);
      }
    }
    differing += !same;
  }
  for (const auto& [key, e] : b) {
    if (a.count(key) == 0) {
      ++differing;
      note("only XLA has " + key.second);
    }
  }
  // Names are unique: a duplicate would hide an event from the pairing.
  differing += (got.size() - a.size()) + (want.size() - b.size());
  return differing;
}

std::vector<Dropped> Sorted(std::vector<Dropped> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// ---- The events, in the order the tracer delivers them ----

constexpr uint32_t kDevices[2] = {8, 9};  // roctracer's device ids are offset
constexpr int kHostThreads = 4;

template <typename T>
struct Arrival {
  typename T::Event event;
  bool auxiliary;
  uint64_t order;
};

template <typename T>
struct Scenario {
  std::vector<Arrival<T>> arrivals;
  uint64_t graph_launch = 0, graph_first = 0, alloc = 0, sync_two = 0, aux_alloc = 0, blit = 0, generic = 0;
  std::vector<uint64_t> wide;  // ids past 2^32
};

template <typename T>
class Builder {
 public:
  using Ev = typename T::Event;
  using Type = typename T::Type;

  explicit Builder(Scenario<T>* s) : s_(s) {}

  // An API callback as the tracer makes it: no device, no stream, zeroed details (a set's and
  // an allocation's get values, and an allocation or synchronisation may name a device, so that
  // a merge that takes them shows).
  Ev Api(uint64_t id, Type type, const std::string& name, bool auxiliary = false, uint32_t device = UINT32_MAX) {
    Ev e = Make(id, type, T::Source::ApiCallback, T::Domain::HIP_API, name);
    e.start_time_ns = host_;
    e.end_time_ns = host_ + 2000;
    e.thread_id = 100 + calls_ % kHostThreads;
    e.device_id = device;
    e.stream_id = Ev::kInvalidStreamId;
    if (type == Type::Memset) e.memset_info = typename T::MemsetDetails{4096 + serial_, serial_ % 2 == 0};
    if (type == Type::MemoryAlloc) e.memalloc_info.num_bytes = 1 << 20;
    if (type == Type::Synchronization) e.synchronization_info.sync_type = T::SyncType::Stream;
    host_ += 500;
    ++calls_;
    s_->arrivals.push_back({e, auxiliary, 0});
    return e;
  }

  // An activity record with its own details, kept in its device's buffer until Flush(device).
  void Activity(uint64_t id, Type type, uint32_t device, const std::string& name) {
    Ev e = Make(id, type, T::Source::Activity, T::Domain::HIP_OPS, name);
    int d = device == kDevices[0] ? 0 : 1;
    e.start_time_ns = gpu_[d];
    e.end_time_ns = gpu_[d] + 3000 + (serial_ * 37) % 1000;
    gpu_[d] = e.end_time_ns + 50;
    e.device_id = device;
    e.stream_id = 0x7000 + static_cast<uint64_t>(d);
    e.queue_id = 0x900 + static_cast<uint64_t>(d);
    if (type == Type::Kernel) {
      e.kernel_info = typename T::KernelDetails{static_cast<uint32_t>(serial_ % 64), 1024u + static_cast<uint32_t>(serial_),
                                                64, 2, 1, 64 * static_cast<uint32_t>(serial_), 2, 1,
                                                reinterpret_cast<void*>(static_cast<uintptr_t>(0x10000 + serial_))};
    } else if (IsCopy<T>(type) || type == Type::MemcpyP2P) {
      e.memcpy_info = typename T::MemcpyDetails{serial_ * 100, device, false};
    } else if (type == Type::Memset) {
      e.memset_info = typename T::MemsetDetails{serial_ * 10, true};
    }
    buffers_[d].push_back(e);
  }

  // The device's buffer arrives.
  void Flush(uint32_t device) {
    int d = device == kDevices[0] ? 0 : 1;
    for (Ev& e : buffers_[d]) s_->arrivals.push_back({std::move(e), false, 0});
    buffers_[d].clear();
  }

  void Finish() {
    Flush(kDevices[0]);
    Flush(kDevices[1]);
    for (size_t i = 0; i < s_->arrivals.size(); ++i) s_->arrivals[i].order = i;
  }

 private:
  Ev Make(uint64_t id, Type type, typename T::Source source, typename T::Domain domain, const std::string& name) {
    Ev e;
    std::memset(static_cast<void*>(&e.kernel_info), 0, sizeof(e.kernel_info));  // the whole union
    e.type = type;
    e.source = source;
    e.domain = domain;
    e.name = name;
    e.annotation = "jit_step";
    e.scope_range_id = static_cast<int64_t>(serial_ % 5);
    e.correlation_id = static_cast<typename T::Id>(id);
    ++serial_;
    return e;
  }

  Scenario<T>* s_;
  uint64_t host_ = 1000000, calls_ = 0, serial_ = 1;
  uint64_t gpu_[2] = {5000000, 5000000};
  std::vector<Ev> buffers_[2];
};

template <typename T>
Scenario<T> MakeScenario(bool wide_ids) {
  using Type = typename T::Type;
  Scenario<T> s;
  Builder<T> b(&s);
  const uint32_t d8 = kDevices[0], d9 = kDevices[1];
  auto tag = [](const char* what, uint64_t n) { return std::string(what) + "#" + std::to_string(n); };
  uint64_t id = 1;
  // Plain launches.
  for (; id <= 60; ++id) {
    b.Api(id, Type::Kernel, tag("hipLaunchKernel", id));
    b.Activity(id, Type::Kernel, id % 2 ? d9 : d8, tag("kernel", id));
  }
  b.Flush(d8);
  b.Flush(d9);
  // A graph launch of 300 kernels on both devices; device 9's buffer arrives first, so the first
  // activity to arrive is on the higher device and starts later than device 8's first.
  s.graph_launch = id;
  b.Api(id, Type::Kernel, tag("hipGraphLaunch", id));
  for (int k = 0; k < 200; ++k) b.Activity(id, Type::Kernel, d8, tag("graph_kernel", id) + "." + std::to_string(k));
  for (int k = 200; k < 300; ++k) b.Activity(id, Type::Kernel, d9, tag("graph_kernel", id) + "." + std::to_string(k));
  s.graph_first = 200;
  b.Flush(d9);
  b.Flush(d8);
  ++id;
  // A second one, on device 8 only.
  b.Api(id, Type::Kernel, tag("hipGraphLaunch", id));
  for (int k = 0; k < 120; ++k) b.Activity(id, Type::Kernel, d8, tag("graph_kernel", id) + "." + std::to_string(k));
  ++id;
  // Copies: the tracer's copy API events are MemcpyOther over any direction; also equal types.
  const Type copies[] = {Type::MemcpyH2D, Type::MemcpyD2H, Type::MemcpyD2D, Type::MemcpyOther};
  for (int i = 0; i < 8; ++i, ++id) {
    b.Api(id, i < 4 ? Type::MemcpyOther : copies[i % 4], tag("hipMemcpyAsync", id));
    b.Activity(id, copies[i % 4], i % 2 ? d9 : d8, tag("copy", id));
  }
  // A copy API event over a blit kernel (the copy's details come from a kernel record).
  s.blit = id;
  b.Api(id, Type::MemcpyOther, tag("hipMemcpy(blit)", id));
  b.Activity(id, Type::Kernel, d9, tag("blit_kernel", id));
  ++id;
  // Sets: one activity, and two under one id.
  for (int i = 0; i < 3; ++i, ++id) {
    b.Api(id, Type::Memset, tag("hipMemsetAsync", id));
    for (int k = 0; k <= i % 2; ++k) b.Activity(id, Type::Memset, d8, tag("set", id) + "." + std::to_string(k));
  }
  // Allocations, frees and synchronisations: the activity runs on another device than the one
  // its API event names (or does not name).
  s.alloc = id;
  b.Api(id, Type::MemoryAlloc, tag("hipMalloc", id), false, d8);
  b.Activity(id, Type::MemoryAlloc, d9, tag("alloc", id));
  ++id;
  b.Api(id, Type::MemoryFree, tag("hipFree", id));
  b.Activity(id, Type::MemoryFree, d9, tag("free", id));
  ++id;
  b.Api(id, Type::Synchronization, tag("hipStreamSynchronize", id));
  b.Activity(id, Type::Synchronization, d8, tag("sync", id));
  ++id;
  // Two synchronisations under one id, the later-starting one (device 9) arriving first.
  s.sync_two = id;
  b.Api(id, Type::Synchronization, tag("hipDeviceSynchronize", id));
  b.Activity(id, Type::Synchronization, d8, tag("sync", id) + ".d8");
  b.Activity(id, Type::Synchronization, d9, tag("sync", id) + ".d9");
  b.Flush(d9);
  b.Flush(d8);
  ++id;
  // Auxiliary API events: alone (a set, an allocation) and beside a main one.
  b.Api(id, Type::Memset, tag("hipMemsetD32(aux)", id), true);
  b.Activity(id, Type::Memset, d9, tag("set", id));
  ++id;
  s.aux_alloc = id;
  b.Api(id, Type::MemoryAlloc, tag("hipMalloc(aux)", id), true, d9);
  b.Activity(id, Type::MemoryAlloc, d8, tag("alloc", id));
  ++id;
  b.Api(id, Type::Memset, tag("hipMemsetAsync(aux)", id), true);
  b.Api(id, Type::Memset, tag("hipMemsetAsync", id));
  b.Activity(id, Type::Memset, d8, tag("set", id));
  ++id;
  b.Api(id, Type::Kernel, tag("hipLaunchKernel(aux, no activity)", id), true);
  ++id;
  // Activities without any API event: one report for the id.
  for (int k = 0; k < 3; ++k) b.Activity(id, Type::Kernel, d9, tag("lost_kernel", id) + "." + std::to_string(k));
  ++id;
  // A duplicate API event (the collector keeps the first and reports the second).
  b.Api(id, Type::Kernel, tag("hipLaunchKernel", id));
  b.Api(id, Type::Kernel, tag("hipLaunchKernel(again)", id));
  b.Activity(id, Type::Kernel, d8, tag("kernel", id));
  ++id;
  // An API event whose activity never arrives: left out, no report.
  b.Api(id, Type::Kernel, tag("hipLaunchKernel(no activity)", id));
  ++id;
  // Types neither loop handles: P2P copies (both dropped), a Generic API event over a kernel
  // (the event dropped, the kernel merged from it), unsupported activities under a kernel API
  // event (each dropped), and an unsupported API event.
  b.Api(id, Type::MemcpyP2P, tag("hipMemcpyPeerAsync", id));
  b.Activity(id, Type::MemcpyP2P, d9, tag("p2p", id));
  ++id;
  s.generic = id;
  b.Api(id, Type::Generic, tag("hipGeneric", id));
  b.Activity(id, Type::Kernel, d8, tag("kernel_under_generic", id));
  ++id;
  b.Api(id, Type::Kernel, tag("hipLaunchKernel(odd activities)", id));
  b.Activity(id, Type::Generic, d8, tag("generic_activity", id));
  b.Activity(id, Type::Unsupported, d8, tag("unsupported_activity", id));
  ++id;
  b.Api(id, Type::Unsupported, tag("hipUnsupported", id));
  b.Activity(id, Type::Memset, d9, tag("set_under_unsupported", id));
  ++id;
  // Ids past 2^32, sharing their low 32 bits with ids above: with an API event of their own
  // (over a low id that has its own too, or none), and without (over a low id that has one).
  if (wide_ids) {
    const uint64_t high = uint64_t{1} << 32;
    uint64_t w = high + 3;  // low: plain launch 3
    b.Api(w, Type::Kernel, tag("hipLaunchKernel", w));
    b.Activity(w, Type::Kernel, d8, tag("kernel", w));
    s.wide.push_back(w);
    w = high + s.alloc;  // low: the allocation
    b.Api(w, Type::MemoryAlloc, tag("hipMalloc", w), false, d9);
    b.Activity(w, Type::MemoryAlloc, d8, tag("alloc", w));
    s.wide.push_back(w);
    w = high + 100000;  // low: no id
    b.Api(w, Type::Memset, tag("hipMemsetAsync", w));
    b.Activity(w, Type::Memset, d9, tag("set", w));
    s.wide.push_back(w);
    w = 2 * high + 5;  // no API event; low: plain launch 5
    b.Activity(w, Type::Kernel, d9, tag("kernel(no api)", w));
    s.wide.push_back(w);
    w = 3 * high + 100001;  // no API event; low: no id
    b.Activity(w, Type::Kernel, d9, tag("kernel(no api, low free)", w));
    s.wide.push_back(w);
  }
  // More plain launches, so that later buffers mix kinds.
  for (int i = 0; i < 40; ++i, ++id) {
    b.Api(id, Type::Kernel, tag("hipLaunchKernel", id));
    b.Activity(id, Type::Kernel, id % 2 ? d8 : d9, tag("kernel", id));
  }
  b.Finish();
  return s;
}

// ---- Runs ----

// The profiler fallbacks the over-limit runs make.
int over_limit_fallbacks = 0;

template <typename T>
typename T::Options Limits(uint64_t api, uint64_t activities) {
  typename T::Options o{};
  o.max_callback_api_events = api;
  o.max_activity_api_events = activities;
  o.max_annotation_strings = 1 << 20;
  o.num_gpus = 2;
  return o;
}

// Fills the collector as the tracer delivers, from one thread, or shuffled over four threads
// (the duplicate API event's two copies stay in their order on one thread: the collector keeps
// the first to arrive, and so do the activities of each id).
template <typename T, template <typename...> class Map>
void Fill(Collector<T, Map>& collector, const Scenario<T>& s, bool threads) {
  if (!threads) {
    for (const Arrival<T>& a : s.arrivals) {
      typename T::Event e = a.event;
      collector.AddEvent(std::move(e), a.auxiliary);
    }
    return;
  }
  // Each id's events stay on one thread, in their order; the ids are spread and interleaved.
  std::vector<std::vector<const Arrival<T>*>> parts(kHostThreads);
  std::mt19937_64 rng(21);
  std::map<uint64_t, int> thread_of;
  for (const Arrival<T>& a : s.arrivals) {
    uint64_t id = a.event.correlation_id;
    auto it = thread_of.find(id);
    if (it == thread_of.end()) it = thread_of.emplace(id, static_cast<int>(rng() % kHostThreads)).first;
    parts[it->second].push_back(&a);
  }
  std::vector<std::thread> pool;
  for (auto& part : parts) {
    pool.emplace_back([&collector, &part] {
      for (const Arrival<T>* a : part) {
        typename T::Event e = a->event;
        collector.AddEvent(std::move(e), a->auxiliary);
      }
    });
  }
  for (std::thread& t : pool) t.join();
}

template <typename T>
const typename T::Event* Named(const std::vector<typename T::Event>& events, const std::string& name) {
  for (const auto& e : events) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

template <typename T>
const typename T::Event& Input(const Scenario<T>& s, const std::string& name) {
  for (const Arrival<T>& a : s.arrivals) {
    if (a.event.name == name) return a.event;
  }
  std::fprintf(stderr, "no event %s\n", name.c_str());
  std::exit(1);
}

template <typename T>
void Check() {
  using Ev = typename T::Event;
  const char* what = T::kName;
  const uint64_t high = uint64_t{1} << 32;
  const auto options = Limits<T>(4 * 1024 * 1024, 4 * 1024 * 1024);

  for (bool wide : {false, true}) {
    if (wide && !T::kWideIds) continue;
    Scenario<T> s = MakeScenario<T>(wide);
    Collector<T, std::unordered_map> collector;
    Fill(collector, s, false);
    std::optional<std::vector<Ev>> hook = collector.Hook(options);
    CHECK(hook.has_value(), "%s: the hook fell back", what);
    if (!hook) return;
    const std::vector<Dropped> hook_drops = Sorted(collector.dropped_);
    size_t activities = 0;
    for (const Arrival<T>& a : s.arrivals) activities += a.event.source == T::Source::Activity;

    // XLA's exchange as it is on the target (32-bit step 2 on main) and with a 64-bit step 2.
    Exchanged<T> xla = XlaExchange<T>(collector.api_events_map_, collector.auxiliary_api_events_map_,
                                      collector.activity_ops_events_map_, /*narrow=*/true);
    Exchanged<T> xla64 = XlaExchange<T>(collector.api_events_map_, collector.auxiliary_api_events_map_,
                                        collector.activity_ops_events_map_, /*narrow=*/false);
    std::vector<Dropped> add_drops;  // AddEvent's (the duplicate), reported before the exchange
    for (const Dropped& d : collector.dropped_) {
      if (d.reason == kDuplicate) add_drops.push_back(d);
    }
    for (Exchanged<T>* x : {&xla, &xla64}) x->dropped.insert(x->dropped.end(), add_drops.begin(), add_drops.end());

    size_t fields = 0;
    size_t differing64 = Compare<T>(what, *hook, xla64.events, true, &fields);
    std::printf("xla_flow profiler (%s%s): %zu events in (%zu activities); hook %zu out, %zu dropped; "
                "XLA %zu out, %zu dropped; %zu fields compared\n",
                what, wide ? ", ids past 2^32" : "", s.arrivals.size(), activities, hook->size(), hook_drops.size(),
                xla.events.size(), xla.dropped.size(), fields);
    CHECK(differing64 == 0, "%s: %zu events differ from XLA's exchange with a 64-bit join", what, differing64);
    CHECK(hook_drops == Sorted(xla64.dropped), "%s: reports differ from XLA's exchange with a 64-bit join", what);
    size_t differing = Compare<T>(what, *hook, xla.events, !wide);
    if (!wide) {
      // Ids below 2^32 (or 32-bit ids): exactly XLA's own exchange.
      CHECK(differing == 0, "%s: %zu events differ from XLA's exchange", what, differing);
      CHECK(hook_drops == Sorted(xla.dropped), "%s: reports differ from XLA's exchange", what);
    } else {
      // Ids past 2^32: XLA's own exchange differs, and only in those ids' events and reports.
      std::printf("xla_flow profiler (%s, ids past 2^32): %zu events and the reports below differ from XLA's own "
                  "32-bit join (the documented difference)\n",
                  what, differing);
      CHECK(differing > 0, "%s: the 64-bit join made no difference", what);
      std::set<std::string> names;
      for (const Ev& e : *hook) names.insert(e.name);
      for (const Ev& e : xla.events) names.insert(e.name);
      std::map<std::string, std::string> hook_by_name, xla_by_name;
      for (const Ev& e : *hook) {
        std::string f;
        for (auto& kv : Fields<T>(e)) f += kv.second + "|";
        hook_by_name[e.name] = f;
      }
      for (const Ev& e : xla.events) {
        std::string f;
        for (auto& kv : Fields<T>(e)) f += kv.second + "|";
        xla_by_name[e.name] = f;
      }
      for (const std::string& n : names) {
        if (hook_by_name[n] != xla_by_name[n]) {
          const Ev& in = Input(s, n);
          CHECK(static_cast<uint64_t>(in.correlation_id) >= high, "%s: %s (id below 2^32) differs from XLA's", what,
                n.c_str());
        }
      }
      std::vector<Dropped> only_hook, only_xla;
      std::vector<Dropped> xd = Sorted(xla.dropped);
      std::set_difference(hook_drops.begin(), hook_drops.end(), xd.begin(), xd.end(), std::back_inserter(only_hook));
      std::set_difference(xd.begin(), xd.end(), hook_drops.begin(), hook_drops.end(), std::back_inserter(only_xla));
      std::printf("  reports only the hook makes: %zu, only XLA: %zu\n", only_hook.size(), only_xla.size());
      for (const Dropped& d : only_hook) {
        CHECK(d.correlation_id >= high, "%s: the hook alone reports id %llu", what,
              static_cast<unsigned long long>(d.correlation_id));
      }
      for (const Dropped& d : only_xla) {
        bool low_of_wide = false;
        for (uint64_t w : s.wide) low_of_wide |= d.correlation_id == static_cast<uint32_t>(w);
        CHECK(low_of_wide, "%s: XLA alone reports id %llu", what, static_cast<unsigned long long>(d.correlation_id));
      }
      // The activity past 2^32 without an API event over a free low id: one report, full id.
      CHECK(std::count(hook_drops.begin(), hook_drops.end(), Dropped{kNoApi, 3 * high + 100001}) == 1,
            "%s: the id past 2^32 without an API event is not reported under its full id", what);
      const Ev* wide_alloc = Named<T>(*hook, "alloc#" + std::to_string(high + s.alloc));
      CHECK(wide_alloc != nullptr && wide_alloc->device_id == kDevices[0],
            "%s: the allocation past 2^32 keeps its own device", what);
    }

    // What XLA does that a misreading could miss, checked on the hook's own output.
    const std::string g = std::to_string(s.graph_launch);
    const Ev& first = Input(s, "graph_kernel#" + g + "." + std::to_string(s.graph_first));
    const Ev* launch = Named<T>(*hook, "hipGraphLaunch#" + g);
    CHECK(launch != nullptr && launch->device_id == kDevices[1] && launch->stream_id == first.stream_id &&
              launch->kernel_info.grid_x == first.kernel_info.grid_x && first.kernel_info.grid_x != 0,
          "%s: the graph launch's API event takes the first activity to arrive (device 9)", what);
    size_t graph_kernels = 0;
    for (const Ev& e : *hook) {
      if (e.source != T::Source::Activity || static_cast<uint64_t>(e.correlation_id) != s.graph_launch) continue;
      ++graph_kernels;
      CHECK(e.kernel_info.grid_x == first.kernel_info.grid_x &&
                e.kernel_info.group_segment_size == first.kernel_info.group_segment_size,
            "%s: %s does not carry the launch's kernel details", what, e.name.c_str());
    }
    CHECK(graph_kernels == 300, "%s: %zu of the graph launch's 300 kernels reported", what, graph_kernels);
    const Ev* alloc = Named<T>(*hook, "alloc#" + std::to_string(s.alloc));
    CHECK(alloc != nullptr && alloc->device_id == kDevices[1], "%s: the allocation keeps its own device", what);
    const Ev* aux_alloc = Named<T>(*hook, "alloc#" + std::to_string(s.aux_alloc));
    CHECK(aux_alloc != nullptr && aux_alloc->device_id == kDevices[1],
          "%s: the allocation under an auxiliary API event takes that event's device", what);
    const std::string two = std::to_string(s.sync_two);
    const Ev* sync8 = Named<T>(*hook, "sync#" + two + ".d8");
    CHECK(sync8 != nullptr && sync8->device_id == kDevices[1],
          "%s: both synchronisations of one id take the first to arrive's device", what);
    const Ev* blit = Named<T>(*hook, "blit_kernel#" + std::to_string(s.blit));
    CHECK(blit != nullptr, "%s: the blit kernel is reported", what);
    const Ev* generic_kernel = Named<T>(*hook, "kernel_under_generic#" + std::to_string(s.generic));
    CHECK(generic_kernel != nullptr && generic_kernel->kernel_info.grid_x == 0,
          "%s: a kernel under a Generic API event takes that event's (empty) details", what);
    size_t merge_drops = std::count_if(hook_drops.begin(), hook_drops.end(),
                                       [](const Dropped& d) { return d.reason == kMissingMerge; });
    CHECK(merge_drops == 6, "%s: %zu unhandled-type reports, 6 expected", what, merge_drops);

    // The documented order: activities by device, start, id; then API events by the device of
    // their id's first activity in that order, start, id.
    std::map<uint64_t, uint32_t> first_device;
    bool in_api = false, ordered = true;
    std::tuple<uint32_t, uint64_t, uint64_t> last{0, 0, 0};
    for (const Ev& e : *hook) {
      uint64_t id = e.correlation_id;
      bool api = e.source == T::Source::ApiCallback;
      if (api && !in_api) {
        in_api = true;
        last = {0, 0, 0};
      }
      if (!api && in_api) ordered = false;
      // An activity is ordered by the device it ran on (before an allocation, free or
      // synchronisation takes another from its API event).
      uint32_t device = api ? e.device_id : Input(s, e.name).device_id;
      if (!api) first_device.emplace(id, device);
      if (api) {
        // An id whose activities were all dropped (unhandled types) has none in the output;
        // its activities here all ran on the device the event took.
        auto it = first_device.find(id);
        if (it != first_device.end()) device = it->second;
      }
      std::tuple<uint32_t, uint64_t, uint64_t> key{device, e.start_time_ns, id};
      if (key < last) ordered = false;
      last = key;
    }
    CHECK(ordered && in_api, "%s: the output is not in the documented order", what);

    // Another arrival order, from four threads, into maps iterated in another order: the same
    // output, in the same order, and the same reports.
    Collector<T, std::map> threaded;
    Fill(threaded, s, true);
    std::optional<std::vector<Ev>> again = threaded.Hook(options);
    CHECK(again.has_value() && again->size() == hook->size(), "%s: the threaded run", what);
    if (again) {
      bool same = again->size() == hook->size();
      for (size_t i = 0; same && i < hook->size(); ++i) same = Fields<T>((*again)[i]) == Fields<T>((*hook)[i]);
      CHECK(same, "%s: the output depends on the order the events arrived in", what);
    }
    CHECK(Sorted(threaded.dropped_) == hook_drops, "%s: the reports depend on the order the events arrived in", what);

    // Bounded as the collector's AddEvent bounds its maps: main API events against
    // max_callback_api_events, activities of the HIP_API domain against max_activity_api_events;
    // auxiliary API events and HIP_OPS activities (every activity the tracer gives) are not
    // counted. Here every other activity is made a HIP_API one. Exactly at both limits, which are
    // below the maps' numbers of API events and of activities, the hook joins them; over either,
    // XLA's loops do (nullopt, a profiler fallback, nothing reported).
    namespace se = ::stream_executor::gpu;
    for (int over = 0; over < 3; ++over) {
      Collector<T, std::unordered_map> limited;
      Fill(limited, s, false);
      size_t hip_api = 0, all = 0;
      for (auto& entry : limited.activity_ops_events_map_) {
        for (Ev& e : entry.second) {
          if (all++ % 2 == 0) {
            e.domain = T::Domain::HIP_API;
            ++hip_api;
          }
        }
      }
      const size_t main_api = limited.api_events_map_.size();
      CHECK(!limited.auxiliary_api_events_map_.empty() && hip_api > 1 && hip_api < all,
            "%s: the maps hold no uncounted event", what);
      const int64_t fallbacks = se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kProfiler);
      size_t before = limited.dropped_.size(), lines = xla_flow_log::lines.size();
      auto limits = Limits<T>(main_api - (over == 1), hip_api - (over == 2));
      std::optional<std::vector<Ev>> out = limited.Hook(limits);
      const bool fell_back = se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kProfiler) == fallbacks + 1;
      if (over == 0) {
        CHECK(out.has_value() && out->size() == hook->size() && !fell_back,
              "%s: refused at its limits (auxiliary API events or HIP_OPS activities counted)", what);
      } else {
        bool said = false;
        for (size_t i = lines; i < xla_flow_log::lines.size(); ++i) {
          said |= xla_flow_log::lines[i].find("joined without the correlator") != std::string::npos;
        }
        CHECK(!out.has_value() && limited.dropped_.size() == before && said && fell_back,
              "%s: over the collector's limit (%s), not left to XLA's loops as a counted fallback", what,
              over == 1 ? "main API events" : "HIP_API activities");
        ++over_limit_fallbacks;
      }
    }
  }
}

}  // namespace

int main() {
  Check<MainTarget>();
  Check<ReleaseTarget>();
  // Every fallback counted, the first of the kind logged as an error and the others not.
  namespace se = ::stream_executor::gpu;
  int errors = 0;
  for (const std::string& line : xla_flow_log::lines) {
    errors += line.rfind("ERROR: ", 0) == 0 && line.find("joined without the correlator") != std::string::npos;
  }
  CHECK(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kProfiler) == over_limit_fallbacks && errors == 1,
        "profiler fallbacks: %lld counted, %d expected; %d errors logged",
        static_cast<long long>(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kProfiler)), over_limit_fallbacks,
        errors);
  return Finish("xla_flow profiler");
}
