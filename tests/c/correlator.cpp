// The correlator through the C++ wrapper (rcb::Correlator in include/rocm_cmdbuf.hpp): 16
// std::threads add through one Correlator at once (single and batch calls), the exchange's
// callbacks fill per-device std::vectors, and the result equals the same events added from one
// thread; a failing call's rcb::Status carries its code and message; the owner frees its handle.
// No GPU runtime is loaded.
//
// Build: C++17 against include/, linked with -lrocm_cmdbuf and -pthread, plain under -Wall
// -Wextra -Werror -pedantic -fno-exceptions -fno-rtti, and with ASan+UBSan (see run.sh).
// Exits 0 when every check holds, 1 otherwise.
#include "rocm_cmdbuf.hpp"

#include "check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

constexpr uint32_t kDevices = 4;

// One joined activity, by value: (device, correlation id, start, joined API id or 0).
using Row = std::tuple<uint32_t, uint64_t, uint64_t, uint64_t>;

struct Collected {
  std::vector<std::vector<Row>> per_device = std::vector<std::vector<Row>>(kDevices);
  uint64_t dropped = 0;
};

int32_t OnActivities(void* user, uint32_t device, uint64_t device_records, const rcb_correlated_activity* r,
                     size_t n) {
  auto* c = static_cast<Collected*>(user);
  if (device >= kDevices) return 1;
  std::vector<Row>& out = c->per_device[device];
  out.reserve(static_cast<size_t>(device_records));
  for (size_t i = 0; i < n; ++i) {
    out.emplace_back(device, r[i].activity->correlation_id, r[i].activity->start_ns,
                     r[i].api != nullptr ? r[i].api->correlation_id : 0);
  }
  return 0;
}

int32_t OnDropped(void* user, const rcb_correlation_report*, size_t n) {
  static_cast<Collected*>(user)->dropped += n;
  return 0;
}

rcb_correlator_sink SinkOf(Collected* c) {
  rcb_correlator_sink s;
  std::memset(&s, 0, sizeof s);
  s.user_data = c;
  s.activities = OnActivities;
  s.dropped = OnDropped;
  return s;
}

rcb_api_event Api(uint64_t id) {
  rcb_api_event e;
  std::memset(&e, 0, sizeof e);
  e.correlation_id = id;
  e.start_ns = id * 10;
  e.end_ns = id * 10 + 5;
  return e;
}

rcb_activity Act(uint64_t id, uint64_t k) {
  rcb_activity a;
  std::memset(&a, 0, sizeof a);
  a.correlation_id = id;
  a.start_ns = 1000 + id * 7 + k;
  a.end_ns = a.start_ns + 3;
  a.device_id = static_cast<uint32_t>(id % kDevices);
  return a;
}

// Ids past 2^32 on odd numbers; every 10th id a graph launch of 200 kernels; every 97th id
// without its API event.
void Events(std::vector<rcb_api_event>* apis, std::vector<rcb_activity>* acts) {
  for (uint64_t i = 0; i < 3000; ++i) {
    const uint64_t id = i % 2 == 0 ? i : (uint64_t{1} << 33) + i;
    if (i % 97 != 5) apis->push_back(Api(id));
    const uint64_t kernels = i % 10 == 0 ? 200 : 1;
    for (uint64_t k = 0; k < kernels; ++k) acts->push_back(Act(id, k));
  }
}

Collected Exchange(const rcb::Correlator& c) {
  Collected got;
  rcb_correlator_summary summary;
  rcb::Status s = c.Exchange(SinkOf(&got), &summary);
  CHECK(s.ok(), "Exchange: %s", s.ToString().c_str());
  return got;
}

}  // namespace

int main() {
  std::vector<rcb_api_event> apis;
  std::vector<rcb_activity> acts;
  Events(&apis, &acts);

  rcb_correlator_config config;
  std::memset(&config, 0, sizeof config);
  rcb::Correlator one;
  CHECK(rcb::Correlator::Create(config, &one).ok(), "Create");
  for (const rcb_api_event& e : apis) CHECK(one.AddApiEvent(e).ok(), "AddApiEvent");
  for (const rcb_activity& a : acts) CHECK(one.AddActivity(a).ok(), "AddActivity");
  const Collected expected = Exchange(one);
  size_t total = 0;
  for (const auto& v : expected.per_device) total += v.size();
  CHECK(total == acts.size(), "%zu of %zu activities", total, acts.size());
  CHECK(expected.dropped == 31, "%llu dropped reports", static_cast<unsigned long long>(expected.dropped));

  rcb::Correlator many;
  CHECK(rcb::Correlator::Create(config, &many).ok(), "Create");
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      // Thread t takes every 16th chunk of 50 events; even threads one call per event, odd
      // threads one call per chunk.
      for (size_t i = t * 50; i < apis.size(); i += 16 * 50) {
        const size_t n = std::min<size_t>(50, apis.size() - i);
        if (t % 2 == 0) {
          for (size_t j = i; j < i + n; ++j) CHECK(many.AddApiEvent(apis[j]).ok(), "AddApiEvent");
        } else {
          CHECK(many.AddApiEvents(rcb::Span<const rcb_api_event>(&apis[i], n)).ok(), "AddApiEvents");
        }
      }
      for (size_t i = t * 50; i < acts.size(); i += 16 * 50) {
        const size_t n = std::min<size_t>(50, acts.size() - i);
        if (t % 2 == 0) {
          for (size_t j = i; j < i + n; ++j) CHECK(many.AddActivity(acts[j]).ok(), "AddActivity");
        } else {
          CHECK(many.AddActivities(rcb::Span<const rcb_activity>(&acts[i], n)).ok(), "AddActivities");
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const Collected got = Exchange(many);
  CHECK(got.per_device == expected.per_device, "16 threads: the output differs from one thread's");
  CHECK(got.dropped == expected.dropped, "16 threads: dropped reports differ");

  // Flushed: the next exchange delivers nothing; counters show the memory kept.
  const Collected empty = Exchange(many);
  for (const auto& v : empty.per_device) CHECK(v.empty(), "a second exchange delivered records");
  rcb_correlator_counters counters;
  CHECK(many.Stats(&counters).ok() && counters.pending_activities == 0 && counters.reserved_bytes > 0, "Stats");
  CHECK(many.Clear().ok() && many.Trim().ok(), "Clear, Trim");

  // Failures carry the code and the message.
  rcb_api_event bad = Api(1);
  bad.flags = 4;
  rcb::Status s = many.AddApiEvent(bad);
  CHECK(s.code() == RCB_STATUS_INVALID_ARGUMENT && s.message().find("flags") != std::string::npos, "%s",
        s.ToString().c_str());
  CHECK(s.message() == last_error(), "the Status holds the library's message: %s", last_error());
  s = many.Exchange(SinkOf(nullptr), nullptr);
  CHECK(s.code() == RCB_STATUS_NULL_ARGUMENT, "%s", s.ToString().c_str());
  CHECK(many.Free().ok() && many.get() == nullptr, "Free");
  s = rcb::Correlator().Clear();
  CHECK(s.code() == RCB_STATUS_NULL_ARGUMENT, "Clear on an empty owner: %s", s.ToString().c_str());

  if (failures) {
    std::fprintf(stderr, "correlator (C++): %d check(s) failed\n", failures);
  } else {
    std::printf("correlator (C++): ok\n");
  }
  return failures ? 1 : 0;
}
