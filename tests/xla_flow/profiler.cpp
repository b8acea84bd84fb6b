// Replays, through include/rocm_cmdbuf.hpp, what a patched XLA's profiler does with
// --xla_gpu_rocm_cmdbuf_profiler (xla-patches/0006):
//
//   * RocmTraceCollectorImpl::AddEvent takes the events as the tracer delivers them: API
//     callbacks when their call ends, on the host threads that made them, and activity records
//     in buffers per device; API events go into a map per kind (a second one of an id is
//     dropped there, as XLA drops it), activities into a vector per id;
//   * ApiActivityInfoExchange (rocm_cmdbuf_correlation.h) feeds the correlator from those maps
//     (API events one by one, each id's activities in one call), the name of every event being
//     the address of the collector's own record, exchanges, and merges fields per event type as
//     XLA's loops do; drops go to OnEventsDropped.
//
// The events: two hipGraphLaunch calls with 400 and 150 kernel activities under one id each,
// plain launches, ids past 2^32 whose low 32 bits are those of other ids, copies, sets,
// allocations, synchronisations, auxiliary API events, activities without any API event, a
// duplicate API event, API events without activities and a type neither merge handles. Checked:
// every activity is reported with the API event of its own id, the merged fields and counts are
// those of XLA's rules (computed here from the event list, independently of the maps), drops are
// reported once per id, the output is in the documented order, and the collector's maps filled
// from four threads in another order (and iterated in another order) give the same output. Run
// with 64-bit correlation ids (ROCm/xla main) and 32-bit ones (rocm-jaxlib-v0.11.1). Host only:
// the correlator needs no GPU. Exits 0 when every check holds.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "check.h"
#include "rocm_cmdbuf.hpp"

namespace {

// XLA's RocmTracerEventType, in its order (the kind code the hook passes is its value).
enum class Type : uint32_t {
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

enum class Source { ApiCallback, Activity };

// The fields of XLA's RocmTracerEvent that the exchange reads or writes. XLA keeps the details
// in a union; here each is its own field so that a check can tell which event it came from:
// every event's details carry its own tag.
template <typename Id>
struct Event {
  Type type = Type::Unsupported;
  Source source = Source::ApiCallback;
  std::string name;
  uint64_t start_time_ns = 0;
  uint64_t end_time_ns = 0;
  uint32_t device_id = 0;
  Id correlation_id = 0;
  uint64_t thread_id = 0;
  uint64_t stream_id = 0;
  uint64_t kernel_info = 0;
  uint64_t memcpy_info = 0;
  uint64_t memset_info = 0;
};

// ---- The patch's rocm_cmdbuf_correlation.{h,cc}, over the model's Event ----

template <typename Ev>
uint64_t RecordName(const Ev& event) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&event));
}

template <typename Ev>
const Ev& RecordOf(uint64_t name) {
  return *reinterpret_cast<const Ev*>(static_cast<uintptr_t>(name));
}

template <typename Ev>
bool MergeIntoActivity(const Ev& api, Ev& activity) {
  switch (activity.type) {
    case Type::Kernel:
      activity.kernel_info = api.kernel_info;
      return true;
    case Type::MemcpyD2H:
    case Type::MemcpyH2D:
    case Type::MemcpyD2D:
    case Type::MemcpyOther:
      return true;
    case Type::Memset:
      activity.memset_info = api.memset_info;
      return true;
    case Type::MemoryAlloc:
    case Type::MemoryFree:
    case Type::Synchronization:
      activity.device_id = api.device_id;
      return true;
    default:
      return false;
  }
}

template <typename Ev>
bool MergeIntoApiEvent(const Ev& activity, Ev& api) {
  api.device_id = activity.device_id;
  api.stream_id = activity.stream_id;
  switch (api.type) {
    case Type::Kernel:
      api.kernel_info = activity.kernel_info;
      return true;
    case Type::Memset:
    case Type::MemoryAlloc:
    case Type::MemoryFree:
    case Type::Synchronization:
      return true;
    case Type::MemcpyD2H:
    case Type::MemcpyH2D:
    case Type::MemcpyD2D:
    case Type::MemcpyOther:
      api.memcpy_info = activity.memcpy_info;
      return true;
    default:
      return false;
  }
}

struct Dropped {
  std::string reason;
  uint64_t correlation_id;
  bool operator<(const Dropped& o) const { return std::tie(reason, correlation_id) < std::tie(o.reason, o.correlation_id); }
  bool operator==(const Dropped& o) const { return reason == o.reason && correlation_id == o.correlation_id; }
};

const char* const kMissingMerge = "Missing API-Activity information exchange. Dropped!";
const char* const kNoApi = "An event from activity was discarded. Could not find the counterpart HIP API.";
const char* const kDuplicate = "event with duplicate correlation_id was received.";

template <typename Ev>
struct Output {
  std::vector<Ev> events;
  std::vector<Dropped> dropped;
};

template <typename Ev>
int32_t OnActivities(void* user_data, uint32_t, uint64_t, const rcb_correlated_activity* records, size_t n) {
  Output<Ev>& out = *static_cast<Output<Ev>*>(user_data);
  for (size_t i = 0; i < n; ++i) {
    if (records[i].api == nullptr) continue;
    Ev event = RecordOf<Ev>(records[i].activity->name);
    if (MergeIntoActivity(RecordOf<Ev>(records[i].api->name), event)) {
      out.events.push_back(std::move(event));
    } else {
      out.dropped.push_back({kMissingMerge, records[i].activity->correlation_id});
    }
  }
  return 0;
}

template <typename Ev>
int32_t OnApiEvents(void* user_data, uint32_t, uint64_t, const rcb_correlated_api_event* records, size_t n) {
  Output<Ev>& out = *static_cast<Output<Ev>*>(user_data);
  for (size_t i = 0; i < n; ++i) {
    Ev event = RecordOf<Ev>(records[i].api->name);
    if (MergeIntoApiEvent(RecordOf<Ev>(records[i].first_activity->name), event)) {
      out.events.push_back(std::move(event));
    } else {
      out.dropped.push_back({kMissingMerge, records[i].api->correlation_id});
    }
  }
  return 0;
}

template <typename Ev>
int32_t OnDropped(void* user_data, const rcb_correlation_report* reports, size_t n) {
  Output<Ev>& out = *static_cast<Output<Ev>*>(user_data);
  for (size_t i = 0; i < n; ++i) out.dropped.push_back({kNoApi, reports[i].correlation_id});
  return 0;
}

// RocmCmdbufCorrelation: one exchange.
template <typename Ev>
class Correlation {
 public:
  Correlation() { status_ = rcb::Correlator::Create(rcb_correlator_config{}, &correlator_); }

  void AddApiEvent(const Ev& event, bool auxiliary) {
    if (!status_.ok()) return;
    rcb_api_event api{};
    api.correlation_id = event.correlation_id;
    api.start_ns = event.start_time_ns;
    api.end_ns = event.end_time_ns;
    api.name = RecordName(event);
    api.thread_id = event.thread_id;
    api.kind = static_cast<uint32_t>(event.type);
    api.flags = auxiliary ? RCB_API_EVENT_AUXILIARY : 0;
    status_ = correlator_.AddApiEvent(api);
    ++events_;
  }

  void AddActivities(const std::vector<Ev>& activities) {
    if (!status_.ok()) return;
    batch_.clear();
    for (const Ev& event : activities) {
      rcb_activity activity{};
      activity.correlation_id = event.correlation_id;
      activity.start_ns = event.start_time_ns;
      activity.end_ns = event.end_time_ns;
      activity.name = RecordName(event);
      activity.stream_id = event.stream_id;
      activity.device_id = event.device_id;
      activity.kind = static_cast<uint32_t>(event.type);
      batch_.push_back(activity);
    }
    status_ = correlator_.AddActivities(batch_);
    events_ += batch_.size();
  }

  std::optional<std::vector<Ev>> Exchange(std::vector<Dropped>* dropped) {
    if (!status_.ok()) {
      std::fprintf(stderr, "adding to the correlator: %s\n", status_.ToString().c_str());
      return std::nullopt;
    }
    Output<Ev> out;
    out.events.reserve(events_);
    rcb_correlator_sink sink{};
    sink.user_data = &out;
    sink.activities = OnActivities<Ev>;
    sink.api_events = OnApiEvents<Ev>;
    sink.dropped = OnDropped<Ev>;
    rcb_correlator_summary summary{};
    rcb::Status joined = correlator_.Exchange(sink, &summary);
    if (!joined.ok()) {
      std::fprintf(stderr, "exchange: %s\n", joined.ToString().c_str());
      return std::nullopt;
    }
    summary_ = summary;
    dropped->insert(dropped->end(), out.dropped.begin(), out.dropped.end());
    return std::move(out.events);
  }

  const rcb_correlator_summary& summary() const { return summary_; }

 private:
  rcb::Correlator correlator_;
  rcb::Status status_;
  size_t events_ = 0;
  std::vector<rcb_activity> batch_;
  rcb_correlator_summary summary_{};
};

// ApiActivityInfoExchangeWithRocmCmdbuf: a template over the collector's maps, whose key is the
// target's correlation-id type. (The patch's also returns nullopt when the flag is off.)
template <typename ApiEventMap, typename ActivityMap, typename Collector>
auto ApiActivityInfoExchangeWithRocmCmdbuf(const ApiEventMap& api_events, const ApiEventMap& auxiliary_api_events,
                                           const ActivityMap& activity_events, Collector& collector,
                                           rcb_correlator_summary* summary)
    -> std::optional<std::vector<typename ApiEventMap::mapped_type>> {
  using Ev = typename ApiEventMap::mapped_type;
  Correlation<Ev> correlation;
  for (const auto& entry : api_events) correlation.AddApiEvent(entry.second, false);
  for (const auto& entry : auxiliary_api_events) correlation.AddApiEvent(entry.second, true);
  for (const auto& entry : activity_events) correlation.AddActivities(entry.second);
  std::vector<Dropped> dropped;
  std::optional<std::vector<Ev>> events = correlation.Exchange(&dropped);
  for (const Dropped& drop : dropped) {
    collector.OnEventsDropped(drop.reason, static_cast<decltype(Ev::correlation_id)>(drop.correlation_id));
  }
  *summary = correlation.summary();
  return events;
}

// ---- RocmTraceCollectorImpl: AddEvent's maps (no limits), OnEventsDropped, the hook ----

template <typename Id, template <typename...> class Map>
class Collector {
 public:
  using Ev = Event<Id>;

  void AddEvent(Ev&& event, bool is_auxiliary) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (event.source == Source::ApiCallback) {
      auto& map = is_auxiliary ? auxiliary_api_events_map_ : api_events_map_;
      if (!map.try_emplace(event.correlation_id, std::move(event)).second) {
        OnEventsDropped(kDuplicate, event.correlation_id);
      }
    } else {
      activity_ops_events_map_[event.correlation_id].push_back(std::move(event));
    }
  }

  void OnEventsDropped(const std::string& reason, Id correlation_id) { dropped_.push_back({reason, correlation_id}); }

  std::optional<std::vector<Ev>> ApiActivityInfoExchange(rcb_correlator_summary* summary) {
    std::lock_guard<std::mutex> lock(mutex_);
    return ApiActivityInfoExchangeWithRocmCmdbuf(api_events_map_, auxiliary_api_events_map_, activity_ops_events_map_,
                                                 *this, summary);
  }

  const std::vector<Dropped>& dropped() const { return dropped_; }

 private:
  std::mutex mutex_;
  Map<Id, Ev> api_events_map_;
  Map<Id, std::vector<Ev>> activity_ops_events_map_;
  Map<Id, Ev> auxiliary_api_events_map_;
  std::vector<Dropped> dropped_;
};

// ---- The events ----

constexpr uint32_t kDevices[2] = {8, 9};  // roctracer's ids are offset by the CPU count
constexpr int kHostThreads = 4;
constexpr size_t kBuffer = 64;  // activity records per delivered buffer

template <typename Id>
struct Arrival {
  Event<Id> event;
  bool auxiliary;
  uint64_t at;     // when the tracer delivers it
  uint64_t order;  // position in the tracer's order
};

template <typename Id>
struct Scenario {
  std::vector<Arrival<Id>> arrivals;  // in the tracer's order
  // Ids of interest.
  uint64_t graph_launch = 0, graph_launch_kernels = 0, second_graph_launch = 0, duplicate = 0, no_api = 0,
           auxiliary_only = 0, main_and_auxiliary = 0, without_activity = 0, unhandled = 0, alloc = 0;
  std::vector<std::pair<uint64_t, uint64_t>> wide;  // (id past 2^32, the id with its low 32 bits)
};

template <typename Id>
class Builder {
 public:
  explicit Builder(Scenario<Id>* s) : s_(s) {}

  // An API callback on host thread `call % kHostThreads`, delivered when the call ends.
  Event<Id> Api(uint64_t id, Type type, const std::string& name, bool auxiliary = false) {
    Event<Id> e = Make(id, type, Source::ApiCallback, name);
    e.start_time_ns = host_;
    e.end_time_ns = host_ + 2000;
    e.thread_id = 100 + calls_ % kHostThreads;
    e.device_id = kDevices[calls_ % 2];  // the device the call was made for
    host_ += 500;  // calls on several threads overlap
    ++calls_;
    s_->arrivals.push_back({e, auxiliary, e.end_time_ns, 0});
    return e;
  }

  // An activity on `device`, after `api` ended, sequential on its device; kept in the device's
  // buffer until it is full.
  void Activity(uint64_t id, Type type, uint32_t device, uint64_t after, const std::string& name) {
    Event<Id> e = Make(id, type, Source::Activity, name);
    int d = device == kDevices[0] ? 0 : 1;
    e.start_time_ns = std::max(gpu_[d], after + 1000);
    e.end_time_ns = e.start_time_ns + 3000 + (serial_ * 37) % 1000;
    e.device_id = device;
    e.stream_id = 7 + static_cast<uint64_t>(d);
    gpu_[d] = e.end_time_ns + 50;
    buffers_[d].push_back(e);
    if (buffers_[d].size() == kBuffer) Deliver(d);
  }

  void Finish() {
    Deliver(0);
    Deliver(1);
    std::stable_sort(s_->arrivals.begin(), s_->arrivals.end(),
                     [](const Arrival<Id>& a, const Arrival<Id>& b) { return a.at < b.at; });
    for (size_t i = 0; i < s_->arrivals.size(); ++i) s_->arrivals[i].order = i;
  }

 private:
  Event<Id> Make(uint64_t id, Type type, Source source, const std::string& name) {
    Event<Id> e;
    e.type = type;
    e.source = source;
    e.name = name;
    e.correlation_id = static_cast<Id>(id);
    ++serial_;
    e.kernel_info = serial_;
    e.memcpy_info = serial_ + 1000000;
    e.memset_info = serial_ + 2000000;
    return e;
  }

  void Deliver(int d) {
    if (buffers_[d].empty()) return;
    uint64_t at = buffers_[d].back().end_time_ns + 10000;
    for (Event<Id>& e : buffers_[d]) s_->arrivals.push_back({std::move(e), false, at, 0});
    buffers_[d].clear();
  }

  Scenario<Id>* s_;
  uint64_t host_ = 1000000, calls_ = 0, serial_ = 0;
  uint64_t gpu_[2] = {0, 0};
  std::vector<Event<Id>> buffers_[2];
};

template <typename Id>
Scenario<Id> MakeScenario(bool wide_ids) {
  Scenario<Id> s;
  Builder<Id> b(&s);
  uint64_t id = 1;
  auto tag = [](const char* what, uint64_t n) { return std::string(what) + "#" + std::to_string(n); };

  // Plain launches, ids 1..200, alternating devices.
  for (int i = 0; i < 200; ++i, ++id) {
    Event<Id> api = b.Api(id, Type::Kernel, tag("hipLaunchKernel", id));
    b.Activity(id, Type::Kernel, kDevices[id % 2], api.end_time_ns, tag("kernel", id));
  }
  // A hipGraphLaunch: 400 kernels under one id, and a second of 150 on the other device.
  s.graph_launch = id;
  s.graph_launch_kernels = 400;
  Event<Id> g = b.Api(id, Type::Kernel, tag("hipGraphLaunch", id));
  for (uint64_t k = 0; k < s.graph_launch_kernels; ++k) {
    b.Activity(id, Type::Kernel, kDevices[0], g.end_time_ns, tag("graph_kernel", id) + "." + std::to_string(k));
  }
  s.second_graph_launch = ++id;
  Event<Id> g2 = b.Api(id, Type::Kernel, tag("hipGraphLaunch", id));
  for (int k = 0; k < 150; ++k) {
    b.Activity(id, Type::Kernel, kDevices[1], g2.end_time_ns, tag("graph_kernel", id) + "." + std::to_string(k));
  }
  ++id;
  // Ids past 2^32 (64-bit ids only): their low 32 bits are those of plain launches 1..20.
  if (wide_ids) {
    for (uint64_t low = 1; low <= 20; ++low) {
      uint64_t big = (uint64_t{1} << 32) + low;
      Event<Id> api = b.Api(big, Type::Kernel, tag("hipLaunchKernel", big));
      b.Activity(big, Type::Kernel, kDevices[(low + 1) % 2], api.end_time_ns, tag("kernel", big));
      s.wide.emplace_back(big, low);
    }
  }
  // Copies and sets, each with its API event.
  const Type copies[] = {Type::MemcpyH2D, Type::MemcpyD2H, Type::MemcpyD2D, Type::MemcpyOther, Type::Memset};
  for (int i = 0; i < 20; ++i, ++id) {
    Type t = copies[i % 5];
    Event<Id> api = b.Api(id, t, tag("hipMemcpyOrSet", id));
    b.Activity(id, t, kDevices[i % 2], api.end_time_ns, tag("copy_or_set", id));
  }
  // An allocation and a synchronisation: the activity's device comes from the API event.
  s.alloc = id;
  Event<Id> alloc = b.Api(id, Type::MemoryAlloc, tag("hipMalloc", id));
  b.Activity(id, Type::MemoryAlloc, kDevices[0] == alloc.device_id ? kDevices[1] : kDevices[0], alloc.end_time_ns,
             tag("alloc", id));
  ++id;
  Event<Id> sync = b.Api(id, Type::Synchronization, tag("hipStreamSynchronize", id));
  b.Activity(id, Type::Synchronization, kDevices[0], sync.end_time_ns, tag("sync", id));
  ++id;
  // A set whose only API event is auxiliary, and one with both: the main one wins.
  s.auxiliary_only = id;
  Event<Id> aux = b.Api(id, Type::Memset, tag("hipMemsetAsync(aux)", id), true);
  b.Activity(id, Type::Memset, kDevices[1], aux.end_time_ns, tag("set", id));
  s.main_and_auxiliary = ++id;
  b.Api(id, Type::Memset, tag("hipMemsetAsync(aux)", id), true);
  Event<Id> main = b.Api(id, Type::Memset, tag("hipMemsetAsync", id));
  b.Activity(id, Type::Memset, kDevices[0], main.end_time_ns, tag("set", id));
  // Three activities without any API event: one report for the id.
  s.no_api = ++id;
  for (int k = 0; k < 3; ++k) b.Activity(id, Type::Kernel, kDevices[1], 0, tag("lost_kernel", id) + "." + std::to_string(k));
  // A duplicate API event: the collector keeps the first that arrives.
  s.duplicate = ++id;
  Event<Id> first = b.Api(id, Type::Kernel, tag("hipLaunchKernel", id));
  b.Api(id, Type::Kernel, tag("hipLaunchKernel(again)", id));
  b.Activity(id, Type::Kernel, kDevices[0], first.end_time_ns, tag("kernel", id));
  // An API event whose activity never arrives: left out, no report.
  s.without_activity = ++id;
  b.Api(id, Type::Kernel, tag("hipLaunchKernel(no activity)", id));
  // A type neither merge handles: both dropped, each reported.
  s.unhandled = ++id;
  Event<Id> p2p = b.Api(id, Type::MemcpyP2P, tag("hipMemcpyPeerAsync", id));
  b.Activity(id, Type::MemcpyP2P, kDevices[1], p2p.end_time_ns, tag("p2p", id));
  // More plain launches after them, so that every buffer mixes kinds.
  for (int i = 0; i < 60; ++i) {
    ++id;
    Event<Id> api = b.Api(id, Type::Kernel, tag("hipLaunchKernel", id));
    b.Activity(id, Type::Kernel, kDevices[id % 2], api.end_time_ns, tag("kernel", id));
  }
  b.Finish();
  return s;
}

// ---- What XLA's rules give, computed from the event list (not from the maps) ----

// One merged event, by value (pointers and map order left out).
using Row = std::tuple<std::string, uint32_t, uint64_t, uint32_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                       uint64_t, bool>;

template <typename Id>
Row RowOf(const Event<Id>& e) {
  return Row(e.name, static_cast<uint32_t>(e.type), static_cast<uint64_t>(e.correlation_id), e.device_id, e.stream_id,
             e.start_time_ns, e.end_time_ns, e.kernel_info, e.memcpy_info, e.memset_info,
             e.source == Source::ApiCallback);
}

struct Expected {
  std::vector<Row> rows;
  std::vector<Dropped> dropped;
};

template <typename Id>
Expected Expect(const Scenario<Id>& s) {
  using Ev = Event<Id>;
  // The kept API events: the first to arrive of each id and kind.
  std::map<uint64_t, const Ev*> main, aux;
  std::map<uint64_t, std::vector<const Ev*>> acts;
  Expected x;
  for (const Arrival<Id>& a : s.arrivals) {
    uint64_t id = a.event.correlation_id;
    if (a.event.source == Source::Activity) {
      acts[id].push_back(&a.event);
    } else if (!(a.auxiliary ? aux : main).emplace(id, &a.event).second) {
      x.dropped.push_back({kDuplicate, id});
    }
  }
  for (const auto& [id, list] : acts) {
    const Ev* api = main.count(id) ? main[id] : aux.count(id) ? aux[id] : nullptr;
    if (api == nullptr) {
      x.dropped.push_back({kNoApi, id});
      continue;
    }
    for (const Ev* a : list) {
      Ev merged = *a;
      if (merged.type == Type::Kernel) merged.kernel_info = api->kernel_info;
      if (merged.type == Type::Memset) merged.memset_info = api->memset_info;
      if (merged.type == Type::MemoryAlloc || merged.type == Type::MemoryFree || merged.type == Type::Synchronization) {
        merged.device_id = api->device_id;
      }
      if (merged.type == Type::MemcpyP2P) {
        x.dropped.push_back({kMissingMerge, id});
      } else {
        x.rows.push_back(RowOf(merged));
      }
    }
  }
  for (const auto& [id, api] : main) {
    auto it = acts.find(id);
    if (it == acts.end()) continue;
    // The first activity: the earliest on the lowest device.
    const Ev* first = *std::min_element(it->second.begin(), it->second.end(), [](const Ev* a, const Ev* b) {
      return std::tie(a->device_id, a->start_time_ns, a->end_time_ns) <
             std::tie(b->device_id, b->start_time_ns, b->end_time_ns);
    });
    Ev merged = *api;
    merged.device_id = first->device_id;
    merged.stream_id = first->stream_id;
    if (merged.type == Type::Kernel) merged.kernel_info = first->kernel_info;
    if (merged.type == Type::MemcpyH2D || merged.type == Type::MemcpyD2H || merged.type == Type::MemcpyD2D ||
        merged.type == Type::MemcpyOther) {
      merged.memcpy_info = first->memcpy_info;
    }
    if (merged.type == Type::MemcpyP2P) {
      x.dropped.push_back({kMissingMerge, id});
    } else {
      x.rows.push_back(RowOf(merged));
    }
  }
  return x;
}

// ---- Runs ----

struct Result {
  std::vector<Row> rows;  // in output order
  std::vector<Dropped> dropped;
  rcb_correlator_summary summary{};
  // For the order check: each output event's activity device as the tracer gave it, and whether
  // it is an API event.
  std::vector<std::tuple<bool, uint32_t, uint64_t, uint64_t>> order_keys;
};

// The tracer's order from one thread, or a shuffled order from four threads (the duplicate's two
// copies stay on one thread, in their order: the collector keeps the first that arrives).
template <typename Id, template <typename...> class Map>
Result Run(const Scenario<Id>& s, bool threads) {
  Collector<Id, Map> collector;
  if (!threads) {
    for (const Arrival<Id>& a : s.arrivals) {
      Event<Id> e = a.event;
      collector.AddEvent(std::move(e), a.auxiliary);
    }
  } else {
    std::vector<const Arrival<Id>*> order;
    for (const Arrival<Id>& a : s.arrivals) order.push_back(&a);
    std::mt19937_64 rng(21);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::vector<const Arrival<Id>*>> parts(kHostThreads);
    std::vector<const Arrival<Id>*> duplicates;
    for (const Arrival<Id>* a : order) {
      if (a->event.source == Source::ApiCallback && a->event.correlation_id == static_cast<Id>(s.duplicate)) {
        duplicates.push_back(a);
      } else {
        parts[a->order % kHostThreads].push_back(a);
      }
    }
    std::sort(duplicates.begin(), duplicates.end(),
              [](const Arrival<Id>* a, const Arrival<Id>* b) { return a->order < b->order; });
    parts[0].insert(parts[0].begin(), duplicates.begin(), duplicates.end());
    std::vector<std::thread> pool;
    for (auto& part : parts) {
      pool.emplace_back([&collector, &part] {
        for (const Arrival<Id>* a : part) {
          Event<Id> e = a->event;
          collector.AddEvent(std::move(e), a->auxiliary);
        }
      });
    }
    for (std::thread& t : pool) t.join();
  }
  Result r;
  std::optional<std::vector<Event<Id>>> events = collector.ApiActivityInfoExchange(&r.summary);
  CHECK(events.has_value(), "the exchange through the correlator failed");
  if (!events) return r;
  std::map<std::string, uint32_t> tracer_device;
  for (const Arrival<Id>& a : s.arrivals) tracer_device[a.event.name] = a.event.device_id;
  for (const Event<Id>& e : *events) {
    r.rows.push_back(RowOf(e));
    bool api = e.source == Source::ApiCallback;
    r.order_keys.emplace_back(api, api ? e.device_id : tracer_device[e.name], e.start_time_ns,
                              static_cast<uint64_t>(e.correlation_id));
  }
  r.dropped = collector.dropped();
  return r;
}

const Row* Find(const std::vector<Row>& rows, const std::string& name) {
  for (const Row& r : rows) {
    if (std::get<0>(r) == name) return &r;
  }
  return nullptr;
}

template <typename Id>
const Event<Id>& EventNamed(const Scenario<Id>& s, const std::string& name) {
  for (const Arrival<Id>& a : s.arrivals) {
    if (a.event.name == name) return a.event;
  }
  std::fprintf(stderr, "no event %s\n", name.c_str());
  std::exit(1);
}

template <typename Id>
void Check(const char* what, bool wide_ids) {
  Scenario<Id> s = MakeScenario<Id>(wide_ids);
  Expected x = Expect(s);
  auto single = Run<Id, std::unordered_map>(s, false);
  auto threaded = Run<Id, std::map>(s, true);

  size_t activities = 0;
  for (const Arrival<Id>& a : s.arrivals) activities += a.event.source == Source::Activity;
  std::printf("xla_flow profiler (%s): %zu events (%zu activities), %zu merged, %zu dropped\n", what,
              s.arrivals.size(), activities, single.rows.size(), single.dropped.size());

  // Counts and fields: XLA's rules, every activity that has an API event of its id.
  std::vector<Row> got = single.rows, want = x.rows;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  CHECK(got.size() == want.size(), "%s: %zu merged events, %zu expected", what, got.size(), want.size());
  CHECK(got == want, "%s: the merged events differ from XLA's rules", what);
  std::vector<Dropped> got_drops = single.dropped, want_drops = x.dropped;
  std::sort(got_drops.begin(), got_drops.end());
  std::sort(want_drops.begin(), want_drops.end());
  CHECK(got_drops == want_drops, "%s: %zu drops reported, %zu expected", what, got_drops.size(), want_drops.size());
  CHECK(single.summary.activities == activities, "%s: the correlator took %llu of %zu activities", what,
        static_cast<unsigned long long>(single.summary.activities), activities);
  CHECK(single.summary.dropped_ids == 1 && single.summary.without_api == 3, "%s: one id without an API event", what);
  CHECK(single.summary.duplicate_ids == 0, "%s: the maps hold no duplicates", what);

  // The graph launch: every one of its kernels, each with the launch's API event.
  const Event<Id>& launch = EventNamed(s, "hipGraphLaunch#" + std::to_string(s.graph_launch));
  size_t launch_kernels = 0;
  for (const Row& r : single.rows) {
    if (std::get<2>(r) == s.graph_launch && !std::get<10>(r)) {
      ++launch_kernels;
      CHECK(std::get<7>(r) == launch.kernel_info, "%s: %s has another API event's details", what,
            std::get<0>(r).c_str());
    }
  }
  CHECK(launch_kernels == s.graph_launch_kernels, "%s: %zu of the graph launch's %llu kernels reported", what,
        launch_kernels, static_cast<unsigned long long>(s.graph_launch_kernels));
  const Row* launch_row = Find(single.rows, launch.name);
  const Event<Id>& first_kernel = EventNamed(s, "graph_kernel#" + std::to_string(s.graph_launch) + ".0");
  CHECK(launch_row != nullptr && std::get<7>(*launch_row) == first_kernel.kernel_info &&
            std::get<3>(*launch_row) == first_kernel.device_id,
        "%s: the launch's API event takes its first kernel's device and details", what);

  // Ids past 2^32 join their own API events, not those of their low 32 bits.
  for (const auto& [big, low] : s.wide) {
    const Row* k = Find(single.rows, "kernel#" + std::to_string(big));
    const Row* k_low = Find(single.rows, "kernel#" + std::to_string(low));
    CHECK(k != nullptr && std::get<2>(*k) == big &&
              std::get<7>(*k) == EventNamed(s, "hipLaunchKernel#" + std::to_string(big)).kernel_info,
          "%s: id %llu joined the wrong API event", what, static_cast<unsigned long long>(big));
    CHECK(k_low != nullptr && std::get<7>(*k_low) == EventNamed(s, "hipLaunchKernel#" + std::to_string(low)).kernel_info,
          "%s: id %llu joined the wrong API event", what, static_cast<unsigned long long>(low));
  }

  // Auxiliary API events: joined when the id has no main one, never reported alone.
  const std::string aux_only = std::to_string(s.auxiliary_only), both = std::to_string(s.main_and_auxiliary);
  const Row* set_aux = Find(single.rows, "set#" + aux_only);
  CHECK(set_aux != nullptr &&
            std::get<9>(*set_aux) == EventNamed(s, "hipMemsetAsync(aux)#" + aux_only).memset_info,
        "%s: the set joins its auxiliary API event", what);
  const Row* set_both = Find(single.rows, "set#" + both);
  CHECK(set_both != nullptr && std::get<9>(*set_both) == EventNamed(s, "hipMemsetAsync#" + both).memset_info,
        "%s: the set joins its main API event over the auxiliary one", what);
  CHECK(Find(single.rows, "hipMemsetAsync(aux)#" + aux_only) == nullptr &&
            Find(single.rows, "hipMemsetAsync(aux)#" + both) == nullptr,
        "%s: an auxiliary API event is reported", what);
  const Row* alloc = Find(single.rows, "alloc#" + std::to_string(s.alloc));
  CHECK(alloc != nullptr &&
            std::get<3>(*alloc) == EventNamed(s, "hipMalloc#" + std::to_string(s.alloc)).device_id,
        "%s: the allocation takes its API event's device", what);

  // Drops: once per id without an API event, the duplicate at AddEvent, both unhandled events.
  auto drops_of = [&](const char* reason, uint64_t id) {
    return std::count(single.dropped.begin(), single.dropped.end(), Dropped{reason, id});
  };
  CHECK(drops_of(kNoApi, s.no_api) == 1, "%s: the id without an API event is not reported once", what);
  CHECK(drops_of(kDuplicate, s.duplicate) == 1 &&
            Find(single.rows, "hipLaunchKernel#" + std::to_string(s.duplicate)) != nullptr &&
            Find(single.rows, "hipLaunchKernel(again)#" + std::to_string(s.duplicate)) == nullptr,
        "%s: the duplicate API event", what);
  CHECK(drops_of(kMissingMerge, s.unhandled) == 2, "%s: the unhandled type is not dropped twice", what);
  CHECK(Find(single.rows, "hipLaunchKernel(no activity)#" + std::to_string(s.without_activity)) == nullptr,
        "%s: an API event without activity is reported", what);

  // The documented order: activities by device, start, id; then API events by their first
  // activity's device, start, id.
  bool ordered = std::is_sorted(single.order_keys.begin(), single.order_keys.end());
  CHECK(ordered, "%s: the output is not in the documented order", what);

  // Another arrival order, from four threads, into maps iterated in another order: same output.
  CHECK(threaded.rows == single.rows, "%s: the output depends on the order the events arrived in", what);
  std::vector<Dropped> threaded_drops = threaded.dropped;
  std::sort(threaded_drops.begin(), threaded_drops.end());
  CHECK(threaded_drops == got_drops, "%s: the drops depend on the order the events arrived in", what);
}

}  // namespace

int main() {
  Check<uint64_t>("64-bit ids, ROCm/xla main", true);
  Check<uint32_t>("32-bit ids, rocm-jaxlib-v0.11.1", false);
  return Finish("xla_flow profiler");
}
