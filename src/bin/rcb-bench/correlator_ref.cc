// The baseline of `rcb-bench correlator`: the work XLA's ROCm trace collector does with the same
// events (xla/backends/profiler/gpu/rocm_collector.cc of ROCm/xla at the pinned commit 183fa00cb5,
// "M" in DESIGN.md's references), written here for the benchmark:
//   - a record of the size of XLA's trace event (a name, two string views, timestamps, ids, a
//     union of per-kind details);
//   - adding: one lock; API records kept one per correlation id in a main or an auxiliary map (a
//     second one is lost), activities appended to a vector per correlation id;
//   - flushing: every API record with an activity copied out with its first activity's device and
//     queue, every activity copied out with its API record's kernel shape, then each moved into its
//     device's sink (a lock and a vector per device, found in a node map), then the maps cleared.
// The maps are absl::flat_hash_map / absl::node_hash_map as in XLA when Abseil's headers were
// found at build time (RCB_REF_ABSL), std::unordered_map otherwise; rcb_ref_map_name() says
// which. Correlation ids stay 64-bit here (M narrows one of them to 32 bits, which only matters
// past 2^32, and the workload stays below). Logging, limits and event kinds other than kernels
// are left out: the workload has only kernels.
//
// Two instantiations: Name = std::string (as XLA) and Name = const char* (what a collector
// would keep if the names were interned), so the table can show what the string copies cost.
//
// Built by build.rs for the rcb-bench binary only; called through the extern "C" functions at
// the bottom.

#include <algorithm>
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

// The size and shape of one XLA trace event: a name, two string views, timestamps, ids and a
// union of per-kind details whose largest member is the kernel's ten 32-bit fields.
struct KernelShape {
  uint32_t segments[2];
  uint32_t workgroup[3];
  uint32_t grid[3];
  uint32_t registers[2];
  bool empty() const { return grid[0] == 0 && grid[1] == 0 && grid[2] == 0; }
};

enum class From { Nothing, Api, Device };

template <class Name>
struct Record {
  From from = From::Nothing;
  Name name{};
  std::string_view annotation, range;
  uint64_t begin = 0, finish = 0;
  uint32_t device = std::numeric_limits<uint32_t>::max();
  uint64_t id = std::numeric_limits<uint64_t>::max();
  uint64_t thread = std::numeric_limits<uint64_t>::max();
  uint64_t queue = std::numeric_limits<uint64_t>::max();
  union {
    KernelShape kernel;
    uint64_t other_details[5];
  };
  Record() : kernel{} {}
};

// One device's output: a lock and a vector, as XLA's per-device collectors.
template <class Name>
struct DeviceSink {
  std::mutex lock;
  std::vector<Record<Name>> records;
};

// The collector's algorithm, for kernel records (the only kind the benchmark produces): one
// lock around three maps keyed by correlation id, then at the flush a join that copies every
// API record (given its first activity's device and queue) and every activity (given its API
// record's kernel shape) into one vector, and a second pass that moves each into its device's
// sink.
template <class Name>
class Collector {
 public:
  using R = Record<Name>;

  void Add(R&& r, bool auxiliary) {
    std::lock_guard<std::mutex> guard(lock_);
    if (r.from == From::Api) {
      FlatMap<uint64_t, R>& target = auxiliary ? auxiliary_ : api_;
      if (!target.emplace(r.id, std::move(r)).second) ++lost_;
    } else {
      device_[r.id].push_back(std::move(r));
    }
  }

  void Flush() {
    std::lock_guard<std::mutex> guard(lock_);
    std::vector<R> joined = Join();
    uint32_t lowest = std::numeric_limits<int32_t>::max();
    for (const R& r : joined) lowest = std::min(lowest, r.device);
    for (R& r : joined) {
      uint32_t slot = r.device - lowest;
      if (slot >= kDevices) {
        ++lost_;
        continue;
      }
      DeviceSink<Name>& sink = sinks_[slot];
      std::lock_guard<std::mutex> sink_guard(sink.lock);
      sink.records.push_back(std::move(r));
    }
    api_.clear();
    auxiliary_.clear();
    device_.clear();
  }

  size_t DeviceRecords(uint32_t slot) { return sinks_[slot].records.size(); }

 private:
  static constexpr uint32_t kDevices = 8;

  std::vector<R> Join() {
    size_t activities = 0;
    for (const auto& entry : device_) activities += entry.second.size();
    std::vector<R> out;
    out.reserve(api_.size() + activities);
    for (auto& entry : api_) {
      R& call = entry.second;
      auto found = device_.find(call.id);
      if (found == device_.end() || found->second.empty()) {
        ++lost_;
        continue;
      }
      const R& first = found->second.front();
      call.device = first.device;
      call.queue = first.queue;
      if (call.kernel.empty() && !first.kernel.empty()) call.kernel = first.kernel;
      out.push_back(call);
    }
    for (auto& entry : device_) {
      const R* call = nullptr;
      if (auto it = api_.find(entry.first); it != api_.end()) {
        call = &it->second;
      } else if (auto aux = auxiliary_.find(entry.first); aux != auxiliary_.end()) {
        call = &aux->second;
      }
      for (R& activity : entry.second) {
        if (call != nullptr && activity.kernel.empty() && !call->kernel.empty()) activity.kernel = call->kernel;
        out.push_back(activity);
      }
    }
    return out;
  }

  std::mutex lock_;
  FlatMap<uint64_t, R> api_, auxiliary_;
  FlatMap<uint64_t, std::vector<R>> device_;
  NodeMap<uint32_t, DeviceSink<Name>> sinks_;
  uint64_t lost_ = 0;
};

// What the tracer's callbacks do before adding: build the record from the runtime's, the name
// copied into a std::string as XLA does (or kept as a pointer).
template <class Name>
Name NameOf(uint64_t p);
template <>
std::string NameOf<std::string>(uint64_t p) {
  return std::string(reinterpret_cast<const char*>(p));
}
template <>
const char* NameOf<const char*>(uint64_t p) {
  return reinterpret_cast<const char*>(p);
}

template <class Name>
void AddApi(void* c, const ApiIn* in) {
  Record<Name> r;
  r.from = From::Api;
  r.name = NameOf<Name>(in->name);
  r.begin = in->start_ns;
  r.finish = in->end_ns;
  r.id = in->correlation_id;
  r.thread = in->thread_id;
  static_cast<Collector<Name>*>(c)->Add(std::move(r), (in->flags & 1) != 0);
}

template <class Name>
void AddActivity(void* c, const ActivityIn* in) {
  Record<Name> r;
  r.from = From::Device;
  r.name = NameOf<Name>(in->name);
  r.begin = in->start_ns;
  r.finish = in->end_ns;
  r.device = in->device_id;
  r.id = in->correlation_id;
  r.queue = in->stream_id;
  r.kernel.grid[0] = 1;
  static_cast<Collector<Name>*>(c)->Add(std::move(r), false);
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
  if (names == 0) return static_cast<Collector<std::string>*>(c)->DeviceRecords(device);
  return static_cast<Collector<const char*>*>(c)->DeviceRecords(device);
}

}  // extern "C"
