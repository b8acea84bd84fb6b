// Replays, through include/rocm_cmdbuf.hpp, the fallbacks of the patch series (issue: every
// library failure in a hook falls back to XLA's own path for that call), with the software GPU's
// fault injection making the library's call fail, and checks that XLA's path then gives exact
// results and leaves nothing behind. The program does not link the library: it opens it through
// 0003's loader (rocm_cmdbuf_library.cc, compiled here), as the patched XLA does, and it runs
// 0003's own decision and accounting (rocm_cmdbuf_fallback.cc, compiled here three times: each
// copy has its own process-wide state; the first is the loader's).
//   0003 CreateRocmCmdbufCommandBuffer (DecideRocmCmdbufOwner): the library fails to create the
//        process's first command buffer: every command buffer is XLA's own (a graph the runtime
//        builds alone) and exact, the library is never asked again, one error logged, one
//        fallback counted; where the first create succeeds, eight threads asking at once create
//        exactly one command buffer through it and all get the library;
//   0003 CreateRocmCmdbufCommandBuffer after the decision: a later create the library fails is
//        XLA's own command buffer for that one, counted; the kinds hold each other (XLA's nested
//        command buffer in the library's primary as a raw child graph, the library's nested one
//        in XLA's primary through its template graph, RocmCmdbufNestedGraph), recorded,
//        updated and launched, exact;
//   0003 AddNative / UpdateNode: nodes the library refuses (a kernel of 4097 arguments, 32 776
//        bytes, past its limits; a memset, a copy and an empty node whose runtime call fails
//        inside it) are built with the HIP graph API as RocmCommandBuffer builds them, each in a
//        graph of its own held as a raw child graph, among the library's own nodes; recorded,
//        updated and launched, every buffer equal to the same command buffer built and updated
//        by the runtime alone, each counted as a node fallback, the first logged;
//   0005 RecordAgainIfFailed: a library update that fails marks the command buffer and the thunk
//        records the execution into a new one (exact); a first finalize that fails there and
//        again in the retry is recorded into XLA's own command buffer (exact); a nested command
//        buffer that cannot take a refused node even as a raw child graph, or whose capture
//        (Trace) the library cannot begin or end, fails its primary's record, which is recorded
//        again into a new command buffer (exact); a launch the library fails is that
//        execution's error and the next execution is recorded into a new one (exact); a launch
//        the library refuses before enqueueing anything (nodes a failed move left unsent;
//        LaunchEnqueuedNothing) runs nothing, and the execution is recorded into a new one and
//        launched in its place (SubmitOrRecordAgain, exact); each counted;
//   0004 RocmCmdbufCommandBuffer::MoveAllocations: a move the library leaves half done (an exec
//        setter fails part-way) is refused, launches stay refused, and XLA's recording path
//        (SetAllocations, BeginUpdate, every command updated, Finalize) gives exact results;
//   0004 GiveTable: a table the library refuses (an entry past the end of the address space;
//        no runtime call is made, so no fault can be injected there) turns moves off for that
//        command buffer, and every move goes down XLA's recording path, exact;
//   0005 UpdateClonedChildNode: a flattened traced command that cannot be updated during a
//        recording (an exec setter fails part-way; or the traced graph, captured again, has
//        another shape) leaves the command buffer refusing launches, and CommandBufferThunk
//        (RecordAgainAfterFailedUpdate, RecordInNewCommandBuffer) drops it and its commands'
//        state and records this execution from scratch into a new one: exact, the launch made
//        before the drop exact, and nothing of the old one left behind; a command buffer whose
//        commands hold a collective is XLA's own from the start (CommandBufferThunk creates it
//        with rocm_cmdbuf off for the thread: the library is never asked, no fallback counted;
//        recorded and updated with the HIP graph API alone, exact), so none of this happens to
//        one;
//   0005 rocm_stream.cc: a failed rcb::StreamAcquire makes XLA create the stream itself
//        (hipStreamCreateWithPriority); giving that stream back to the cache is
//        RCB_STATUS_INVALID_HANDLE with the stream untouched, so XLA destroys it (no double
//        destroy, no leak); a cached stream whose release fails (query and destroy fail) is a
//        counted "stream release" fallback, and the cache no longer holds it;
//   0005 RocmCmdbufTraceCache::GetOrTrace: a failed get (the capture's end fails) returns
//        nullptr and XLA traces the command itself into a nested command buffer (Trace:
//        CaptureBegin/CaptureEnd), recorded as a cloned child; a capture the library cannot
//        cache comes back uncached (RCB_TRACE_UNCACHED), the trace function run once, and is
//        recorded as any other;
//   0005 CreateClonedChildNode: a failed flatten becomes one cloned child node (AddChildGraph);
//   0007 RocmCmdbufVmmPool::Execute: a slot whose stream-ordered acquire fails runs that
//        execution without the pool; a copy the pool cannot enqueue is made by the stream; a
//        release the library cannot make (its timeline write and the host synchronize after it
//        fail) leaves that execution's result exact and the device's pool unused from then on
//        (the library would refuse the slot, nothing enqueued), the next executions exact
//        without it; every one of these counted as a VMM pool fallback, the first logged.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/log/log.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"

#define ROCM_CMDBUF_AVAILABLE 1
#include "xla/stream_executor/rocm/rocm_cmdbuf_library.cc"
// The loader's own accounting (a library that cannot be used is a "load" fallback).
#include "xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc"
// The thread's options, which CommandBufferThunk turns off to create XLA's own command buffer
// for commands holding a collective.
#include "xla/stream_executor/rocm/rocm_cmdbuf_options.cc"
// Whether a failed launch enqueued nothing (LaunchEnqueuedNothing, 0005), which
// CommandBufferThunk::SubmitOrRecordAgain asks before it records and launches again.
#include "xla/stream_executor/rocm/rocm_cmdbuf_bridge.cc"

#undef XLA_STREAM_EXECUTOR_ROCM_ROCM_CMDBUF_FALLBACK_H_

namespace failed_first {
#include "xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc"
}  // namespace failed_first

#undef XLA_STREAM_EXECUTOR_ROCM_ROCM_CMDBUF_FALLBACK_H_

namespace created_first {
#include "xla/stream_executor/rocm/rocm_cmdbuf_fallback.cc"
}  // namespace created_first

namespace {

constexpr uint64_t kN = 256;
constexpr uint64_t kBytes = kN * 4;

struct CopyArgs {
  uint64_t dst, src, bytes;
};

std::vector<uint32_t> Pattern(uint32_t seed) {
  std::vector<uint32_t> v(kN);
  for (uint64_t i = 0; i < kN; ++i) v[i] = seed * 1000 + static_cast<uint32_t>(i);
  return v;
}

bool Holds(Gpu& gpu, uint64_t p, uint32_t seed) {
  std::vector<uint32_t> got(kN);
  gpu.Read(got.data(), p, kBytes);
  return got == Pattern(seed);
}

int ErrorLines() {
  int n = 0;
  for (const std::string& line : xla_flow_log::lines) n += line.rfind("ERROR: ", 0) == 0 ? 1 : 0;
  return n;
}

std::string LastError() {
  for (auto line = xla_flow_log::lines.rbegin(); line != xla_flow_log::lines.rend(); ++line) {
    if (line->rfind("ERROR: ", 0) == 0) return *line;
  }
  return "";
}

struct Trace {
  Gpu* gpu;
  void* copy;
  CopyArgs args;
  int calls = 0;  // the trace function's host-side work, as a custom call's handler
};

int32_t TraceFn(void* user_data, void* stream) {
  auto* t = static_cast<Trace*>(user_data);
  ++t->calls;
  t->gpu->LaunchPacked(t->copy, 1, 256, &t->args, sizeof t->args, stream);
  return 0;
}

void Streams(Gpu& gpu, void* copy) {
  OK(rcb::StreamCacheTrim(-1));
  const uint64_t live = gpu.LiveCount("stream");
  CHECK(gpu.SetFaults("hipStreamCreateWithPriority:1"), "fault injection");
  void* stream = nullptr;
  rcb::Status acquired = rcb::StreamAcquire(0, 0, 0, &stream);
  gpu.SetFaults("");
  CHECK(!acquired.ok() && stream == nullptr, "the injected fault fails the acquire: %s", acquired.ToString().c_str());
  // AcquireRocmCmdbufStream returned nullptr: CreateStream goes on as without the flag.
  stream = gpu.NewStream();
  uint64_t src = gpu.Malloc(kBytes), dst = gpu.Malloc(kBytes);
  gpu.Write(src, Pattern(1).data(), kBytes);
  CopyArgs args{dst, src, kBytes};
  gpu.LaunchPacked(copy, 1, 256, &args, sizeof args, stream);
  const bool synchronized = gpu.SyncStatus(stream) == 0;
  CHECK_RESULT(Holds(gpu, dst, 1), "the stream XLA created runs");
  // DestroyStream: ReleaseRocmCmdbufStream, which hands back what the cache does not hold.
  rcb::Status released = synchronized ? rcb::StreamReleaseIdle(stream) : rcb::StreamRelease(stream);
  CHECK(released.code() == RCB_STATUS_INVALID_HANDLE, "a stream the cache does not hold: %s", released.ToString().c_str());
  gpu.LaunchPacked(copy, 1, 256, &args, sizeof args, stream);
  CHECK_CONTRACT(gpu.SyncStatus(stream) == 0, "the stream is untouched by the refused release");
  // XLA's own destroy.
  CHECK(gpu.DestroyStream(stream) == 0, "XLA destroys its stream");
  CHECK(gpu.LiveCount("stream") == live, "no stream left behind (%llu, %llu before)",
        static_cast<unsigned long long>(gpu.LiveCount("stream")), static_cast<unsigned long long>(live));

  // A stream of the cache whose release fails (its query fails, so the cache destroys it, and
  // the destroy fails): a "stream release" fallback, and XLA does not destroy it again.
  namespace se = created_first::stream_executor::gpu;
  void* cached = nullptr;
  OK(rcb::StreamAcquire(0, 0, 0, &cached));
  gpu.LaunchPacked(copy, 1, 256, &args, sizeof args, cached);
  CHECK(gpu.SetFaults("hipStreamQuery:1,hipStreamDestroy:1"), "fault injection");
  released = rcb::StreamRelease(cached);
  gpu.SetFaults("");
  CHECK(!released.ok() && released.code() != RCB_STATUS_INVALID_HANDLE, "the injected faults fail the release: %s",
        released.ToString().c_str());
  // ReleaseRocmCmdbufStream: counted, and the stream counts as given back.
  se::RocmCmdbufFellBack(se::RocmCmdbufFallback::kStreamRelease, "giving a stream back: " + released.ToString());
  CHECK(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kStreamRelease) == 1, "the failed release counted");
  CHECK_CONTRACT(rcb::StreamRelease(cached).code() == RCB_STATUS_INVALID_HANDLE,
                 "the cache still holds a stream whose release failed");
  // The destroy that failed left the stream to the process; the test destroys it.
  CHECK(gpu.SyncStatus(cached) == 0 && gpu.DestroyStream(cached) == 0, "the stream the failed destroy left");
  CHECK(gpu.LiveCount("stream") == live, "no stream left behind after the failed release");
  gpu.Free(src);
  gpu.Free(dst);
}

void TraceCacheAndFlatten(Gpu& gpu, void* copy, void* stream) {
  uint64_t src = gpu.Malloc(kBytes), dst = gpu.Malloc(kBytes);
  gpu.Write(src, Pattern(2).data(), kBytes);
  gpu.Write(dst, Pattern(0).data(), kBytes);
  Trace t{&gpu, copy, {dst, src, kBytes}};
  rcb::TraceCache cache;
  OK(rcb::TraceCache::Create(4, &cache));
  rcb_allocation key[] = {{src, kBytes}, {dst, kBytes}};
  void* graph = nullptr;
  uint32_t outcome = 0;
  CHECK(gpu.SetFaults("hipStreamEndCapture:1"), "fault injection");
  rcb::Status got = cache.GetOrTrace(stream, key, TraceFn, &t, &graph, &outcome);
  gpu.SetFaults("");
  CHECK(!got.ok() && graph == nullptr, "the injected fault fails the get: %s", got.ToString().c_str());

  rcb::CmdBuf parent;
  OK(rcb::CmdBuf::Create(0, &parent));
  // GetOrTrace returned nullptr: RecordTracedCommand traces with XLA's TracedCommandBuffer,
  // whose nested command buffer (a rocm_cmdbuf one) records by Trace, then CreateChildCommand.
  rcb::CmdBuf nested;
  OK(rcb::CmdBuf::CreateNested(0, &nested));
  OK(nested.CaptureBegin(stream));
  CHECK(TraceFn(&t, stream) == 0, "trace");
  OK(nested.CaptureEnd());
  OK(nested.Finalize());
  rcb_node first = 0;
  OK(parent.AddChild({}, nested, &first));

  // The next record gets the graph from the cache, and its flatten fails: one cloned child.
  OK(cache.GetOrTrace(stream, key, TraceFn, &t, &graph, &outcome));
  rcb_node second = 0;
  rcb_flatten_report report{};
  CHECK(gpu.SetFaults("hipGraphGetNodes:1"), "fault injection");
  rcb::Status flattened = parent.AddFlattenedChild({&first, 1}, nullptr, graph, &second, &report);
  gpu.SetFaults("");
  if (flattened.ok()) {
    Skipped("a failed flatten", "the injected fault did not reach the flatten");
  } else {
    OK(parent.AddChildGraph({&first, 1}, graph, &second));
  }
  OK(parent.Finalize());
  OK(parent.Launch(stream));
  CHECK(gpu.SyncStatus(stream) == 0, "launch");
  CHECK_RESULT(Holds(gpu, dst, 2), "XLA's trace and the cloned child copied exactly");

  // A capture the library cannot cache (a fault while it flattens it) comes back uncached: the
  // hook uses it as any other graph, and the trace function's host-side work ran once.
  rcb::TraceCache fresh;
  OK(rcb::TraceCache::Create(4, &fresh));
  gpu.Write(src, Pattern(3).data(), kBytes);
  gpu.Write(dst, Pattern(0).data(), kBytes);
  const int calls = t.calls;
  CHECK(gpu.SetFaults("hipGraphGetNodes:1"), "fault injection");
  got = fresh.GetOrTrace(stream, key, TraceFn, &t, &graph, &outcome);
  gpu.SetFaults("");
  CHECK(got.ok() && outcome == RCB_TRACE_UNCACHED && graph != nullptr && t.calls == calls + 1,
        "a capture that cannot be cached: %s, outcome %u, %d trace calls", got.ToString().c_str(), outcome,
        t.calls - calls);
  rcb::CmdBuf uncached;
  OK(rcb::CmdBuf::Create(0, &uncached));
  rcb_node child = 0;
  OK(uncached.AddChildGraph({}, graph, &child));
  OK(uncached.Finalize());
  OK(uncached.Launch(stream));
  CHECK(gpu.SyncStatus(stream) == 0, "launch of the uncached capture");
  CHECK_RESULT(Holds(gpu, dst, 3), "the uncached capture copied exactly");
  gpu.Free(src);
  gpu.Free(dst);
}

void VmmPool(Gpu& gpu, void* copy, void* sleep, void* stream) {
  namespace se = created_first::stream_executor::gpu;
  const int errors = ErrorLines();
  auto fell_back = [](const std::string& what) { se::RocmCmdbufFellBack(se::RocmCmdbufFallback::kVmmPool, what); };
  const std::vector<uint64_t> sizes = {kBytes};
  rcb_vmm_pool_config config{};
  config.device = 0;
  config.backing = RCB_VMM_BACKING_DEVICE;
  config.num_slots = 1;
  config.num_buffers = 1;
  config.buffer_sizes = sizes.data();
  rcb::VmmPool pool;
  OK(rcb::VmmPool::Create(config, &pool));
  bool usable = true;   // DevicePool::usable
  rcb_vmm_slot held{};  // the slot whose release failed
  uint64_t in = gpu.Malloc(kBytes), out = gpu.Malloc(kBytes);
  void* other = gpu.NewStream();
  for (uint32_t step = 1; step <= 5; ++step) {
    gpu.Write(in, Pattern(step).data(), kBytes);
    gpu.Write(out, Pattern(0).data(), kBytes);
    // Step 2: the slot is still in use on the GPU and the stream's wait cannot be enqueued;
    // step 3: the pool cannot enqueue its copies; step 4: the release can neither enqueue its
    // timeline write nor write it from the host; step 5: the pool is not used any more.
    if (step == 2) {
      // Another execution holds the slot on another stream, still running.
      rcb_vmm_slot busy{};
      OK(pool.AcquireOnStream(other, &busy));
      uint64_t us = 50000;
      gpu.LaunchPacked(sleep, 1, 1, &us, sizeof us, other);
      OK(pool.Release(busy, other));
      CHECK(gpu.SetFaults("hipStreamWaitValue64:1"), "fault injection");
    }
    rcb_vmm_slot slot{};
    rcb::Status acquired = usable ? pool.AcquireOnStream(stream, &slot) : rcb::Status();
    gpu.SetFaults("");
    CHECK(acquired.ok() == (step != 2), "step %u: acquire: %s", step, acquired.ToString().c_str());
    if (!acquired.ok()) fell_back("acquiring a VMM pool slot: " + acquired.ToString());
    if (!usable || !acquired.ok()) {
      // This execution runs without the pool, on the caller's buffers.
      CopyArgs args{out, in, kBytes};
      gpu.LaunchPacked(copy, 1, 256, &args, sizeof args, stream);
    } else {
      auto copies = [&](std::vector<rcb_vmm_copy> c) {
        if (step == 3) CHECK(gpu.SetFaults("hipMemcpyDtoDAsync:1"), "fault injection");
        rcb::Status copied = pool.Copy(stream, c);
        gpu.SetFaults("");
        CHECK(copied.ok() == (step != 3), "step %u: copy: %s", step, copied.ToString().c_str());
        if (!copied.ok()) {
          fell_back("copying: " + copied.ToString());
          // Copied by the stream itself (se::Stream::MemcpyD2D).
          for (const rcb_vmm_copy& one : c) {
            CopyArgs args{one.dst, one.src, one.bytes};
            gpu.LaunchPacked(copy, 1, 256, &args, sizeof args, stream);
          }
        }
      };
      copies({{slot.buffers[0], in, kBytes}});
      uint64_t us = 20000;
      gpu.LaunchPacked(sleep, 1, 1, &us, sizeof us, stream);
      copies({{out, slot.buffers[0], kBytes}});
      if (step == 4) CHECK(gpu.SetFaults("hipStreamWriteValue64:1,hipStreamSynchronize:1"), "fault injection");
      rcb::Status released = pool.Release(slot, stream);
      gpu.SetFaults("");
      CHECK(released.ok() == (step != 4), "step %u: release: %s", step, released.ToString().c_str());
      if (!released.ok()) {
        // Not this execution's error: the pool is not used again on this device.
        usable = false;
        held = slot;
        fell_back("releasing a VMM pool slot: " + released.ToString());
        // The library refuses the slot from now on rather than make a stream wait forever.
        rcb_vmm_slot refused{};
        rcb::Status again = pool.AcquireOnStream(stream, &refused);
        CHECK_CONTRACT(again.code() == RCB_STATUS_INVALID_STATE, "a slot whose release failed handed out again: %s",
                       again.ToString().c_str());
      }
    }
    CHECK(gpu.SyncStatus(stream) == 0, "step %u", step);
    CHECK_RESULT(Holds(gpu, out, step), "step %u: the live-out at the caller's address", step);
  }
  CHECK(gpu.SyncStatus(other) == 0, "the other execution");
  // Acquire (step 2), the two copies (step 3) and the release (step 4); one error logged.
  CHECK(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kVmmPool) == 4 && ErrorLines() == errors + 1,
        "VMM pool fallbacks: %lld counted, %d errors logged",
        static_cast<long long>(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kVmmPool)), ErrorLines() - errors);
  // ~RocmCmdbufVmmPool: the free refuses the held slot (the hook then leaves the memory with the
  // process); here the slot is released on a healthy stream so that the test leaves nothing.
  CHECK(pool.Free().code() == RCB_STATUS_INVALID_STATE, "the free of a pool whose slot is held");
  OK(pool.Release(held, stream));
  CHECK(gpu.SyncStatus(stream) == 0, "the late release");
  OK(pool.Free());
  gpu.Free(in);
  gpu.Free(out);
  std::printf("VMM pool: a failed acquire, failed copies and a failed release fell back, exact; no pool after the "
              "failed release\n");
}

// The copy kernel's arguments as the bridge gives them: two device addresses and a size.
struct CopyKernel {
  uint64_t dst, src, bytes;
  rcb_kernel_arg args[3];
  CopyKernel(uint64_t d, uint64_t s) : dst(d), src(s), bytes(kBytes) {
    args[0] = {&dst, 8, RCB_ARG_DEVICE_PTR};
    args[1] = {&src, 8, RCB_ARG_DEVICE_PTR};
    args[2] = {&bytes, 8, RCB_ARG_VALUE};
  }
  CopyKernel(const CopyKernel&) = delete;
  CopyKernel& operator=(const CopyKernel&) = delete;
  rcb_kernel_launch Launch(void* copy) const { return rcb_kernel_launch{sizeof(rcb_kernel_launch), copy, {1, 1, 1}, {256, 1, 1}, 0, args, 3}; }
};

// CreateRocmCmdbufCommandBuffer's create, as the first decision runs it: the library's create,
// its failure as the hook words it (ToStatus).
std::string CreateThroughLibrary(rcb::CmdBuf* cb) {
  rcb::Status created = rcb::CmdBuf::Create(0, cb);
  return created.ok() ? "" : "Failed to create command buffer: rocm_cmdbuf: " + created.ToString();
}

void CreateOnce(Gpu& gpu, void* copy) {
  {
    namespace se = failed_first::stream_executor::gpu;
    const int errors = ErrorLines();
    std::atomic<int> tried{0};
    rcb::CmdBuf first;
    CHECK(gpu.SetFaults("hipGraphCreate:1"), "fault injection");
    se::RocmCmdbufOwner owner = se::DecideRocmCmdbufOwner([&] {
      ++tried;
      return CreateThroughLibrary(&first);
    });
    gpu.SetFaults("");
    CHECK(owner == se::RocmCmdbufOwner::kXla && first.get() == nullptr, "a failed first create leaves XLA's path");
    // Every later command buffer, from any thread: XLA's, the library never asked again.
    std::vector<std::thread> threads;
    std::atomic<int> library{0};
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&] {
        rcb::CmdBuf cb;
        se::RocmCmdbufOwner later = se::DecideRocmCmdbufOwner([&] {
          ++tried;
          return CreateThroughLibrary(&cb);
        });
        library += later == se::RocmCmdbufOwner::kLibrary ? 1 : 0;
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(tried == 1 && library == 0, "the library asked %d times, %d later command buffers its", tried.load(),
          library.load());
    CHECK(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kCreateCommandBuffer) == 1, "%lld fallbacks counted",
          static_cast<long long>(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kCreateCommandBuffer)));
    const std::string error = LastError();
    CHECK(ErrorLines() == errors + 1 && error.find("Failed to create command buffer") != std::string::npos &&
              error.find("recorded without rocm_cmdbuf") != std::string::npos,
          "one error saying why and what happens: %s", error.c_str());
    // XLA's own command buffer, made without the library, computes exactly.
    uint64_t src = gpu.Malloc(kBytes), dst = gpu.Malloc(kBytes);
    gpu.Write(src, Pattern(5).data(), kBytes);
    gpu.Write(dst, Pattern(0).data(), kBytes);
    gpu.LaunchCaptured([&](void* stream) {
      CopyArgs args{dst, src, kBytes};
      gpu.LaunchPacked(copy, 1, 256, &args, sizeof args, stream);
    });
    CHECK_RESULT(Holds(gpu, dst, 5), "XLA's own command buffer");
    gpu.Free(src);
    gpu.Free(dst);
  }
  {
    namespace se = created_first::stream_executor::gpu;
    const int errors = ErrorLines();
    std::atomic<int> tried{0};
    std::vector<rcb::CmdBuf> made(8);
    std::vector<std::thread> threads;
    std::atomic<int> library{0};
    for (size_t i = 0; i < made.size(); ++i) {
      threads.emplace_back([&, i] {
        se::RocmCmdbufOwner owner = se::DecideRocmCmdbufOwner([&] {
          ++tried;
          return CreateThroughLibrary(&made[i]);
        });
        library += owner == se::RocmCmdbufOwner::kLibrary ? 1 : 0;
      });
    }
    for (std::thread& t : threads) t.join();
    int created = 0;
    for (const rcb::CmdBuf& cb : made) created += cb.get() != nullptr ? 1 : 0;
    CHECK(tried == 1 && created == 1 && library == 8, "first create on 8 threads: %d tries, %d made, %d the library's",
          tried.load(), created, library.load());
    CHECK(ErrorLines() == errors && se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kCreateCommandBuffer) == 0,
          "a successful first create logs and counts nothing");
  }
  std::printf("create once: a failed first create gives XLA's command buffers for good; a successful one the "
              "library's\n");
}

// Three copies in → a → b → out through one command buffer, the allocation table {in, a, b, out}.
class Chain {
 public:
  Chain(Gpu& gpu, void* copy) : gpu_(gpu), copy_(copy) {
    for (uint64_t& p : addr_) p = gpu_.Malloc(kBytes);
  }
  ~Chain() {
    for (uint64_t p : addr_) gpu_.Free(p);
    for (uint64_t p : retired_) gpu_.Free(p);
  }
  std::vector<rcb_allocation> Table() const {
    std::vector<rcb_allocation> t;
    for (uint64_t p : addr_) t.push_back({p, kBytes});
    return t;
  }
  // RecordCreate (update false) or RecordUpdate of the three kernels.
  void Record(rcb::CmdBuf& cb, bool update) {
    for (int i = 0; i < 3; ++i) {
      CopyKernel k(addr_[i + 1], addr_[i]);
      if (update) {
        OK(cb.UpdateKernel(nodes_[i], k.Launch(copy_)));
      } else if (i == 0) {
        OK(cb.AddKernel({}, k.Launch(copy_), &nodes_[i]));
      } else {
        OK(cb.AddKernel({&nodes_[i - 1], 1}, k.Launch(copy_), &nodes_[i]));
      }
    }
  }
  // RecordUpdate of the three kernels up to the first the library fails, as the thunk's record
  // stops at the first error.
  rcb::Status TryUpdate(rcb::CmdBuf& cb) {
    for (int i = 0; i < 3; ++i) {
      CopyKernel k(addr_[i + 1], addr_[i]);
      rcb::Status updated = cb.UpdateKernel(nodes_[i], k.Launch(copy_));
      if (!updated.ok()) return updated;
    }
    return rcb::Status();
  }
  // A BFC-like allocator moved every allocation.
  std::vector<rcb_allocation_move> MoveAll() {
    std::vector<rcb_allocation_move> moves;
    for (size_t i = 0; i < addr_.size(); ++i) {
      retired_.push_back(addr_[i]);
      addr_[i] = gpu_.Malloc(kBytes);
      moves.push_back({i, addr_[i]});
    }
    return moves;
  }
  // Fresh input, garbage elsewhere.
  void Fill(uint32_t seed) {
    gpu_.Write(addr_[0], Pattern(seed).data(), kBytes);
    for (size_t i = 1; i < addr_.size(); ++i) gpu_.Write(addr_[i], Pattern(0).data(), kBytes);
  }
  // Whether the output holds the input of `seed` (once the stream is synchronized).
  bool Holds(uint32_t seed) const { return ::Holds(gpu_, addr_[3], seed); }
  // Fill, then launches `cb` and checks that the output is the input.
  bool Run(rcb::CmdBuf& cb, uint32_t seed) {
    Fill(seed);
    OK(cb.Launch(gpu_.stream()));
    gpu_.Sync();
    return Holds(seed);
  }

 private:
  Gpu& gpu_;
  void* copy_;
  std::vector<uint64_t> addr_ = std::vector<uint64_t>(4);
  std::vector<uint64_t> retired_;
  rcb_node nodes_[3] = {};
};

// Moves every allocation of `chain` in `cb` with the second exec setter failing, after the first
// node was patched: the move is left half done (an error, or needs_rerecord).
void MoveHalfWay(Gpu& gpu, Chain& chain, rcb::CmdBuf& cb) {
  std::vector<rcb_allocation_move> moves = chain.MoveAll();
  CHECK(gpu.SetFaults("hipGraphExecKernelNodeSetParams:2"), "fault injection");
  rcb_update_report report{};
  rcb::Status moved = cb.MoveAllocations(moves, &report);
  gpu.SetFaults("");
  CHECK(!moved.ok() || report.needs_rerecord == 1, "the injected fault left the move in place: %s",
        moved.ToString().c_str());
}

void FailedMove(Gpu& gpu, void* copy) {
  Chain chain(gpu, copy);
  rcb::CmdBuf cb;
  OK(rcb::CmdBuf::Create(0, &cb));
  OK(cb.SetAllocations(chain.Table()));  // CommandBufferThunk::Initialize, then the first record
  chain.Record(cb, false);
  OK(cb.Finalize());
  CHECK_RESULT(chain.Run(cb, 1), "first execution");
  // MoveCommandBufferAllocations: the second exec setter fails, after the first node was patched.
  MoveHalfWay(gpu, chain, cb);
  CHECK_CONTRACT(!cb.Launch(gpu.stream()).ok(), "a launch of half-moved nodes allowed");
  // MoveAllocations returned false: SetAllocations on the finalized buffer (pending), then the
  // recording: BeginUpdate and the pending table (CheckCanBeUpdated), every command, Finalize.
  OK(cb.BeginUpdate());
  OK(cb.SetAllocations(chain.Table()));
  chain.Record(cb, true);
  OK(cb.Finalize());
  CHECK_RESULT(chain.Run(cb, 2), "after the failed move, recorded again");
  // The next move is in place again.
  std::vector<rcb_allocation_move> moves = chain.MoveAll();
  rcb_update_report report{};
  OK(cb.MoveAllocations(moves, &report));
  CHECK(report.needs_rerecord == 0 && report.moved_allocations == 4, "the next move in place");
  CHECK_RESULT(chain.Run(cb, 3), "moved in place after the fallback");
  std::printf("failed move: recorded again, exact; the next move in place\n");
}

void RefusedTable(Gpu& gpu, void* copy) {
  Chain chain(gpu, copy);
  rcb::CmdBuf cb;
  OK(rcb::CmdBuf::Create(0, &cb));
  std::vector<rcb_allocation> table = chain.Table();
  table.push_back({UINT64_MAX - 16, 64});  // runs past the end of the address space
  rcb::Status given = cb.SetAllocations(table);
  CHECK(!given.ok(), "the table was taken");
  // GiveTable: moves off for this command buffer; the recording goes on.
  chain.Record(cb, false);
  OK(cb.Finalize());
  CHECK_RESULT(chain.Run(cb, 1), "first execution");
  for (uint32_t step = 2; step <= 4; ++step) {
    // SupportsAllocationMoves() is false: XLA's recording path for every move.
    chain.MoveAll();
    OK(cb.BeginUpdate());
    chain.Record(cb, true);
    OK(cb.Finalize());
    CHECK_RESULT(chain.Run(cb, step), "step %u: recorded again after the refused table", step);
  }
  std::printf("refused table: every move recorded again, exact\n");
}

// The flattened traced command of FailedFlattenedUpdate: a → b, b → c (and b → c again when
// `third`) on the capturing stream.
struct TracedCopies {
  Gpu* gpu;
  void* copy;
  const std::vector<uint64_t>* addr;
  bool third = false;
};

int32_t TraceCopies(void* user_data, void* stream) {
  auto* t = static_cast<TracedCopies*>(user_data);
  const std::vector<uint64_t>& a = *t->addr;
  CopyArgs ab{a[2], a[1], kBytes}, bc{a[3], a[2], kBytes};
  t->gpu->LaunchPacked(t->copy, 1, 256, &ab, sizeof ab, stream);
  t->gpu->LaunchPacked(t->copy, 1, 256, &bc, sizeof bc, stream);
  if (t->third) t->gpu->LaunchPacked(t->copy, 1, 256, &bc, sizeof bc, stream);
  return 0;
}

// One command buffer of the thunk: in → a, the traced command (a → b → c) flattened, c → out;
// allocations {in, a, b, c, out, hidden}. The traced command's key also holds `hidden`, which
// none of its nodes names (as a collective's work queue holds its buffers): new addresses
// capture it again instead of relocating it. --xla_gpu_rocm_cmdbuf_update_in_place is off, so
// every move is recorded again.
class Flattened {
 public:
  Flattened(Gpu& gpu, void* copy, std::vector<uint64_t>& addr, TracedCopies& traced)
      : gpu_(gpu), copy_(copy), addr_(addr), traced_(traced) {
    OK(rcb::TraceCache::Create(16, &cache_));  // a new command buffer has new trace caches
    OK(rcb::CmdBuf::Create(0, &cb_));
    OK(cb_.SetAllocations(Table()));
    OK(Record(false));
    OK(cb_.Finalize());
  }
  rcb::CmdBuf& cb() { return cb_; }
  // The thunk's RecordUpdate; the flattened update's failure is returned, as the hook returns it.
  rcb::Status Update() {
    OK(cb_.BeginUpdate());
    rcb::Status updated = Record(true);
    if (updated.ok()) OK(cb_.Finalize());
    return updated;
  }

 private:
  std::vector<rcb_allocation> Table() const {
    std::vector<rcb_allocation> t;
    for (uint64_t p : addr_) t.push_back({p, kBytes});
    return t;
  }
  rcb::Status Record(bool update) {
    CopyKernel first(addr_[1], addr_[0]), last(addr_[4], addr_[3]);
    if (update) {
      OK(cb_.UpdateKernel(first_, first.Launch(copy_)));
    } else {
      OK(cb_.AddKernel({}, first.Launch(copy_), &first_));
    }
    // PlatformTraceCache::GetOrTrace over the command's allocations, then the flattened child.
    std::vector<rcb_allocation> key = {{addr_[1], kBytes}, {addr_[2], kBytes}, {addr_[3], kBytes},
                                       {addr_[5], kBytes}};
    void* graph = nullptr;
    uint32_t outcome = 0;
    OK(cache_.GetOrTrace(gpu_.stream(), key, TraceCopies, &traced_, &graph, &outcome));
    rcb_flatten_report report{};
    if (update) {
      if (fault_ != nullptr) CHECK(gpu_.SetFaults(fault_), "fault injection");
      rcb::Status updated = cb_.UpdateFlattenedChild(group_, nullptr, graph, &report);
      gpu_.SetFaults("");
      if (!updated.ok()) return updated;
      OK(cb_.UpdateKernel(last_, last.Launch(copy_)));
    } else {
      OK(cb_.AddFlattenedChild({&first_, 1}, nullptr, graph, &group_, &report));
      CHECK(report.flattened == 1, "not flattened: %s", report.reason);
      OK(cb_.AddKernel({&group_, 1}, last.Launch(copy_), &last_));
    }
    return rcb::Status();
  }

 public:
  const char* fault_ = nullptr;  // injected just before the flattened update

 private:
  Gpu& gpu_;
  void* copy_;
  std::vector<uint64_t>& addr_;
  TracedCopies& traced_;
  rcb::TraceCache cache_;
  rcb::CmdBuf cb_;
  rcb_node first_ = 0, group_ = 0, last_ = 0;
};

void FailedFlattenedUpdate(Gpu& gpu, void* copy, void* sleep, const char* fault, const char* what) {
  const uint64_t graphs = gpu.LiveCount("graph"), execs = gpu.LiveCount("exec");
  std::vector<uint64_t> addr(6);
  for (uint64_t& p : addr) p = gpu.Malloc(kBytes);
  std::vector<uint64_t> retired;
  TracedCopies traced{&gpu, copy, &addr};
  // `slow`: behind a slow kernel.
  auto launch = [&](rcb::CmdBuf& cb, uint32_t seed, bool slow) {
    gpu.Write(addr[0], Pattern(seed).data(), kBytes);
    for (size_t i = 1; i < addr.size(); ++i) gpu.Write(addr[i], Pattern(0).data(), kBytes);
    uint64_t us = 50000;
    if (slow) gpu.LaunchPacked(sleep, 1, 1, &us, sizeof us, gpu.stream());
    OK(cb.Launch(gpu.stream()));
  };
  auto run = [&](rcb::CmdBuf& cb, uint32_t seed) {
    launch(cb, seed, false);
    gpu.Sync();
    return Holds(gpu, addr[4], seed);
  };
  auto move_all = [&] {
    for (uint64_t& p : addr) {
      retired.push_back(p);
      p = gpu.Malloc(kBytes);
    }
  };
  {
    auto old = std::make_unique<Flattened>(gpu, copy, addr, traced);
    CHECK_RESULT(run(old->cb(), 1), "%s: first execution", what);
    // The second execution's launch, behind a slow kernel: still running when the old command
    // buffer is freed below, as XLA's executions are not waited for.
    launch(old->cb(), 2, true);
    const uint64_t second_out = addr[4];
    move_all();
    old->fault_ = fault;
    traced.third = fault == nullptr;  // captured again with another shape
    rcb::Status updated = old->Update();
    CHECK(fault != nullptr ? !updated.ok() : updated.code() == RCB_STATUS_INVALID_ARGUMENT,
          "%s: the flattened update: %s", what, updated.ToString().c_str());
    // The hook: RecordAgainAfterFailedUpdate set, the error returned; its command buffer refuses
    // launches while it is half recorded.
    CHECK_CONTRACT(!old->cb().Launch(gpu.stream()).ok(), "%s: a launch of a half-updated command buffer allowed",
                   what);
    // CommandBufferThunk::RecordInNewCommandBuffer: the old command buffer's state (its trace
    // cache), then the command buffer itself, dropped without waiting for its launch (as on
    // eviction and at an executable's teardown: every free of a library command buffer goes
    // through ~RocmCmdbufCommandBuffer); then this execution recorded from scratch in a new one.
    const uint64_t destroyed_in_flight = gpu.LiveCount("exec_destroyed_in_flight");
    old.reset();
    CHECK(gpu.LiveCount("exec_destroyed_in_flight") == destroyed_in_flight,
          "%s: the old command buffer's executable graph destroyed while its launch ran", what);
    Flattened fresh(gpu, copy, addr, traced);
    CHECK_RESULT(run(fresh.cb(), 3), "%s: recorded again in a new command buffer", what);
    CHECK_RESULT(Holds(gpu, second_out, 2), "%s: the launch made before the old command buffer was freed", what);
    // The next move, recorded as usual in the new command buffer.
    move_all();
    OK(fresh.Update());
    CHECK_RESULT(run(fresh.cb(), 4), "%s: the new command buffer updated", what);
  }
  CHECK(gpu.LiveCount("graph") == graphs && gpu.LiveCount("exec") == execs,
        "%s: graphs %llu (%llu before), execs %llu (%llu before)", what,
        static_cast<unsigned long long>(gpu.LiveCount("graph")), static_cast<unsigned long long>(graphs),
        static_cast<unsigned long long>(gpu.LiveCount("exec")), static_cast<unsigned long long>(execs));
  for (uint64_t p : addr) gpu.Free(p);
  for (uint64_t p : retired) gpu.Free(p);
  std::printf("failed flattened update (%s): recorded again in a new command buffer, exact\n", what);
}

// The HIP graph API as XLA's own RocmCommandBuffer calls it (HIP only; ROCm 6 struct layouts).
struct HipDim3 {
  uint32_t x, y, z;
};
struct HipKernelNodeParams {
  HipDim3 block_dim;
  void** extra;
  void* func;
  HipDim3 grid_dim;
  void** kernel_params;
  uint32_t shared_mem_bytes;
};
struct HipMemsetParams {
  void* dst;
  uint32_t element_size;
  size_t height, pitch;
  uint32_t value;
  size_t width;
};

class HipGraphs {
 public:
  explicit HipGraphs(Gpu& gpu)
      : create_(gpu.Hip<int (*)(void**, unsigned)>("hipGraphCreate")),
        destroy_(gpu.Hip<int (*)(void*)>("hipGraphDestroy")),
        kernel_(gpu.Hip<int (*)(void**, void*, void* const*, size_t, const HipKernelNodeParams*)>(
            "hipGraphAddKernelNode")),
        memset_(gpu.Hip<int (*)(void**, void*, void* const*, size_t, const HipMemsetParams*)>(
            "hipGraphAddMemsetNode")),
        memcpy_(gpu.Hip<int (*)(void**, void*, void* const*, size_t, uint64_t, uint64_t, size_t, int)>(
            "hipGraphAddMemcpyNode1D")),
        empty_(gpu.Hip<int (*)(void**, void*, void* const*, size_t)>("hipGraphAddEmptyNode")),
        child_(gpu.Hip<int (*)(void**, void*, void* const*, size_t, void*)>("hipGraphAddChildGraphNode")),
        instantiate_(gpu.Hip<int (*)(void**, void*, void*, char*, size_t)>("hipGraphInstantiate")),
        launch_(gpu.Hip<int (*)(void*, void*)>("hipGraphLaunch")),
        exec_destroy_(gpu.Hip<int (*)(void*)>("hipGraphExecDestroy")),
        exec_kernel_(gpu.Hip<int (*)(void*, void*, const HipKernelNodeParams*)>("hipGraphExecKernelNodeSetParams")),
        exec_child_(gpu.Hip<int (*)(void*, void*, void*)>("hipGraphExecChildGraphNodeSetParams")) {}

  void* Graph() {
    void* g = nullptr;
    CHECK(create_(&g, 0) == 0, "hipGraphCreate");
    return g;
  }
  void Destroy(void* graph) { CHECK(destroy_(graph) == 0, "hipGraphDestroy"); }
  // RocmCommandBuffer::CreateKernelNode: kernelParams from the packed arguments' addresses.
  static HipKernelNodeParams Kernel(void* f, uint32_t block, std::vector<void*>& params) {
    return HipKernelNodeParams{{block, 1, 1}, nullptr, f, {1, 1, 1}, params.data(), 0};
  }
  // RocmCommandBuffer::CreateMemsetNode of 32-bit elements.
  static HipMemsetParams Memset(uint64_t dst, uint32_t value, size_t count) {
    return HipMemsetParams{reinterpret_cast<void*>(dst), 4, 1, 0, value, count};
  }
  void* AddKernel(void* g, std::vector<void*> deps, const HipKernelNodeParams& p) {
    void* n = nullptr;
    CHECK(kernel_(&n, g, deps.data(), deps.size(), &p) == 0, "hipGraphAddKernelNode");
    return n;
  }
  void* AddMemset(void* g, std::vector<void*> deps, const HipMemsetParams& p) {
    void* n = nullptr;
    CHECK(memset_(&n, g, deps.data(), deps.size(), &p) == 0, "hipGraphAddMemsetNode");
    return n;
  }
  void* AddMemcpy(void* g, std::vector<void*> deps, uint64_t dst, uint64_t src, size_t bytes) {
    void* n = nullptr;
    CHECK(memcpy_(&n, g, deps.data(), deps.size(), dst, src, bytes, 3) == 0, "hipGraphAddMemcpyNode1D");
    return n;
  }
  void* AddEmpty(void* g, std::vector<void*> deps) {
    void* n = nullptr;
    CHECK(empty_(&n, g, deps.data(), deps.size()) == 0, "hipGraphAddEmptyNode");
    return n;
  }
  void* AddChild(void* g, std::vector<void*> deps, void* child) {
    void* n = nullptr;
    CHECK(child_(&n, g, deps.data(), deps.size(), child) == 0, "hipGraphAddChildGraphNode");
    return n;
  }
  void* Instantiate(void* g) {
    void* e = nullptr;
    CHECK(instantiate_(&e, g, nullptr, nullptr, 0) == 0, "hipGraphInstantiate");
    return e;
  }
  void Launch(Gpu& gpu, void* exec) {
    CHECK(launch_(exec, gpu.stream()) == 0, "hipGraphLaunch");
    gpu.Sync();
  }
  void ExecDestroy(void* exec) { CHECK(exec_destroy_(exec) == 0, "hipGraphExecDestroy"); }
  void SetKernel(void* exec, void* node, const HipKernelNodeParams& p) {
    CHECK(exec_kernel_(exec, node, &p) == 0, "hipGraphExecKernelNodeSetParams");
  }
  void SetChild(void* exec, void* node, void* child) {
    CHECK(exec_child_(exec, node, child) == 0, "hipGraphExecChildGraphNodeSetParams");
  }

 private:
  int (*create_)(void**, unsigned);
  int (*destroy_)(void*);
  int (*kernel_)(void**, void*, void* const*, size_t, const HipKernelNodeParams*);
  int (*memset_)(void**, void*, void* const*, size_t, const HipMemsetParams*);
  int (*memcpy_)(void**, void*, void* const*, size_t, uint64_t, uint64_t, size_t, int);
  int (*empty_)(void**, void*, void* const*, size_t);
  int (*child_)(void**, void*, void* const*, size_t, void*);
  int (*instantiate_)(void**, void*, void*, char*, size_t);
  int (*launch_)(void*, void*);
  int (*exec_destroy_)(void*);
  int (*exec_kernel_)(void*, void*, const HipKernelNodeParams*);
  int (*exec_child_)(void*, void*, void*);
};

// rcb_test_wide_args_u64(out, w1 .. w4096): writes w4096 to *out. 32 776 bytes of arguments,
// past the library's limits (4096 arguments, 32 764 bytes), which the software GPU takes.
struct WideKernel {
  static constexpr size_t kWords = 4096;
  uint64_t out;
  std::vector<uint64_t> words;
  std::vector<void*> params;  // the packed arguments' addresses (kernelParams)
  std::vector<rcb_kernel_arg> args;
  WideKernel(uint64_t o, uint64_t last) : out(o), words(kWords) {
    for (size_t i = 0; i < kWords; ++i) words[i] = i + 1;
    words[kWords - 1] = last;
    params.push_back(&out);
    args.push_back({&out, 8, RCB_ARG_DEVICE_PTR});
    for (uint64_t& w : words) {
      params.push_back(&w);
      args.push_back({&w, 8, RCB_ARG_VALUE});
    }
  }
  WideKernel(const WideKernel&) = delete;
  WideKernel& operator=(const WideKernel&) = delete;
  rcb_kernel_launch Launch(void* f) const {
    return rcb_kernel_launch{sizeof(rcb_kernel_launch), f, {1, 1, 1}, {1, 1, 1}, 0, args.data(), args.size()};
  }
};

// RocmCmdbufCommandBuffer::AddNative and UpdateNode (0003), as the hook runs them after the
// library refused a node operation: the node XLA's RocmCommandBuffer builds, in a graph of its
// own, held by the library as a raw child graph; updated with a new such graph.
class NativeNodes {
 public:
  explicit NativeNodes(HipGraphs& hip) : hip_(hip) {}
  template <class AddNode>
  rcb_node Add(rcb::CmdBuf& cb, std::vector<rcb_node> deps, const rcb::Status& refused, const char* what,
               AddNode add) {
    CHECK(!refused.ok(), "%s: the library took the node", what);
    void* graph = hip_.Graph();
    add(graph);
    rcb_node node = 0;
    OK(cb.AddChildGraph(deps, graph, &node));
    hip_.Destroy(graph);
    namespace se = created_first::stream_executor::gpu;
    se::RocmCmdbufFellBack(se::RocmCmdbufFallback::kNode,
                           std::string(what) + ": " + refused.ToString() +
                               "; the node is built as XLA's RocmCommandBuffer builds it, in a child graph of its own");
    return node;
  }
  template <class AddNode>
  void Update(rcb::CmdBuf& cb, rcb_node node, AddNode add) {
    void* graph = hip_.Graph();
    add(graph);
    OK(cb.UpdateChildGraph(node, graph));
    hip_.Destroy(graph);
  }

 private:
  HipGraphs& hip_;
};

// A library command buffer whose node operations the library refuses (a kernel past its
// argument limits; a memset, a copy and an empty node whose runtime call inside the library
// fails), each built by the hook as XLA builds it, among nodes the library made; recorded,
// launched, updated and launched again. Every buffer is compared with the same nodes built and
// updated by the runtime alone, as XLA's own RocmCommandBuffer builds them.
void RefusedNodes(Gpu& gpu, void* copy, void* wide) {
  namespace se = created_first::stream_executor::gpu;
  HipGraphs hip(gpu);
  NativeNodes native(hip);
  const int64_t counted = se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kNode);
  const int errors = ErrorLines();
  // Two sets of buffers: {x, y, z, out} for the library's command buffer, the same for XLA's.
  struct Buffers {
    uint64_t x, y, z, out;
  };
  auto alloc = [&] {
    Buffers b{gpu.Malloc(kBytes), gpu.Malloc(kBytes), gpu.Malloc(kBytes), gpu.Malloc(8)};
    for (uint64_t p : {b.x, b.y, b.z}) gpu.Write(p, Pattern(0).data(), kBytes);
    uint64_t zero = 0;
    gpu.Write(b.out, &zero, 8);
    return b;
  };
  Buffers lib = alloc(), xla = alloc();
  auto same = [&](const char* when) {
    const uint64_t lib_buffers[] = {lib.x, lib.y, lib.z}, xla_buffers[] = {xla.x, xla.y, xla.z};
    for (int i = 0; i < 3; ++i) {
      std::vector<uint32_t> a(kN), b(kN);
      gpu.Read(a.data(), lib_buffers[i], kBytes);
      gpu.Read(b.data(), xla_buffers[i], kBytes);
      CHECK_RESULT(a == b, "%s: buffer %d differs from XLA's path", when, i);
    }
    uint64_t a = 0, b = 0;
    gpu.Read(&a, lib.out, 8);
    gpu.Read(&b, xla.out, 8);
    CHECK_RESULT(a == b && a != 0, "%s: the wide kernel wrote %llu, XLA's path %llu", when,
                 static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  };

  // memset x (7) -> copy x to y -> wide kernel -> empty -> copy kernel y to z (the library's).
  rcb::CmdBuf cb;
  OK(rcb::CmdBuf::Create(0, &cb));
  CHECK(gpu.SetFaults("hipGraphAddMemsetNode:1"), "fault injection");
  rcb_node set = 0;
  rcb::Status refused = cb.AddMemset({}, lib.x, 7, 4, kN, &set);
  gpu.SetFaults("");
  set = native.Add(cb, {}, refused, "adding a memset node",
                   [&](void* g) { hip.AddMemset(g, {}, HipGraphs::Memset(lib.x, 7, kN)); });
  CHECK(gpu.SetFaults("hipGraphAddMemcpyNode1D:1"), "fault injection");
  rcb_node copied = 0;
  refused = cb.AddMemcpyD2D({&set, 1}, lib.y, lib.x, kBytes, &copied);
  gpu.SetFaults("");
  copied = native.Add(cb, {set}, refused, "adding a memcpy node",
                      [&](void* g) { hip.AddMemcpy(g, {}, lib.y, lib.x, kBytes); });
  WideKernel lib_wide(lib.out, 41);
  rcb_node wide_node = 0;
  refused = cb.AddKernel({&copied, 1}, lib_wide.Launch(wide), &wide_node);
  CHECK(refused.code() == RCB_STATUS_INVALID_ARGUMENT, "the wide kernel past the library's limits: %s",
        refused.ToString().c_str());
  wide_node = native.Add(cb, {copied}, refused, "adding a kernel node", [&](void* g) {
    hip.AddKernel(g, {}, HipGraphs::Kernel(wide, 1, lib_wide.params));
  });
  CHECK(gpu.SetFaults("hipGraphAddEmptyNode:1"), "fault injection");
  rcb_node join = 0;
  refused = cb.AddEmpty({&wide_node, 1}, &join);
  gpu.SetFaults("");
  join = native.Add(cb, {wide_node}, refused, "adding an empty node", [&](void* g) { hip.AddEmpty(g, {}); });
  CopyKernel lib_copy(lib.z, lib.y);
  rcb_node last = 0;
  OK(cb.AddKernel({&join, 1}, lib_copy.Launch(copy), &last));
  OK(cb.Finalize());
  OK(cb.Launch(gpu.stream()));
  gpu.Sync();

  // XLA's own path: the same nodes in one graph, by the runtime alone.
  void* g = hip.Graph();
  void* xset = hip.AddMemset(g, {}, HipGraphs::Memset(xla.x, 7, kN));
  void* xcopied = hip.AddMemcpy(g, {xset}, xla.y, xla.x, kBytes);
  WideKernel xla_wide(xla.out, 41);
  void* xwide = hip.AddKernel(g, {xcopied}, HipGraphs::Kernel(wide, 1, xla_wide.params));
  void* xjoin = hip.AddEmpty(g, {xwide});
  CopyKernel xla_copy(xla.z, xla.y);
  std::vector<void*> copy_params = {&xla_copy.dst, &xla_copy.src, &xla_copy.bytes};
  void* xlast = hip.AddKernel(g, {xjoin}, HipGraphs::Kernel(copy, 256, copy_params));
  void* exec = hip.Instantiate(g);
  hip.Launch(gpu, exec);
  same("first launch");

  // The update: the memset and the wide kernel with new parameters (native: a new graph each),
  // the library's own kernel updated by the library.
  OK(cb.BeginUpdate());
  native.Update(cb, set, [&](void* graph) { hip.AddMemset(graph, {}, HipGraphs::Memset(lib.x, 9, kN)); });
  WideKernel lib_wide2(lib.out, 43);
  native.Update(cb, wide_node, [&](void* graph) {
    hip.AddKernel(graph, {}, HipGraphs::Kernel(wide, 1, lib_wide2.params));
  });
  CopyKernel lib_copy2(lib.x, lib.y);  // z is left as it was; x gets y after the update
  OK(cb.UpdateKernel(last, lib_copy2.Launch(copy)));
  OK(cb.Finalize());
  OK(cb.Launch(gpu.stream()));
  gpu.Sync();
  // XLA's RocmCommandBuffer::UpdateMemsetNode, UpdateKernelNode: the executable graph's setters.
  auto set_memset = gpu.Hip<int (*)(void*, void*, const HipMemsetParams*)>("hipGraphExecMemsetNodeSetParams");
  HipMemsetParams memset9 = HipGraphs::Memset(xla.x, 9, kN);
  CHECK(set_memset(exec, xset, &memset9) == 0, "hipGraphExecMemsetNodeSetParams");
  WideKernel xla_wide2(xla.out, 43);
  hip.SetKernel(exec, xwide, HipGraphs::Kernel(wide, 1, xla_wide2.params));
  CopyKernel xla_copy2(xla.x, xla.y);
  std::vector<void*> copy2_params = {&xla_copy2.dst, &xla_copy2.src, &xla_copy2.bytes};
  hip.SetKernel(exec, xlast, HipGraphs::Kernel(copy, 256, copy2_params));
  hip.Launch(gpu, exec);
  same("after the update");
  hip.ExecDestroy(exec);
  hip.Destroy(g);

  CHECK(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kNode) == counted + 4, "%lld node fallbacks counted",
        static_cast<long long>(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kNode) - counted));
  const std::string error = LastError();
  CHECK(ErrorLines() == errors + 1 && error.find("adding a memset node") != std::string::npos,
        "one error, for the first node fallback: %s", error.c_str());
  for (uint64_t p : {lib.x, lib.y, lib.z, lib.out, xla.x, xla.y, xla.z, xla.out}) gpu.Free(p);
  std::printf("refused nodes: built as XLA builds them in child graphs of their own, updated, exact\n");
}

// A create the library fails after it made the process's first command buffer: that command
// buffer is XLA's own, and the two kinds hold each other. A library parent takes XLA's nested
// command buffer as a raw child graph (and updates it as one); XLA's parent takes the library's
// nested command buffer through its template graph (RocmCmdbufNestedGraph), as it takes its own.
void LaterCreateFails(Gpu& gpu, void* copy) {
  namespace se = created_first::stream_executor::gpu;
  HipGraphs hip(gpu);
  const int64_t counted = se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kCreateCommandBuffer);
  uint64_t a = gpu.Malloc(kBytes), b = gpu.Malloc(kBytes), c = gpu.Malloc(kBytes);
  auto create = [&](bool primary, rcb::CmdBuf* cb) {
    // CreateRocmCmdbufCommandBuffer after the decision: the library's create, and on its
    // failure XLA's own command buffer for this one (nullptr), counted.
    rcb::Status created = primary ? rcb::CmdBuf::Create(0, cb) : rcb::CmdBuf::CreateNested(0, cb);
    se::RocmCmdbufOwner owner = se::DecideRocmCmdbufOwner([] { return std::string("decided before"); });
    CHECK(owner == se::RocmCmdbufOwner::kLibrary, "the process decided for the library");
    if (created.ok()) return true;
    se::RocmCmdbufFellBack(se::RocmCmdbufFallback::kCreateCommandBuffer,
                           "Failed to create command buffer: " + created.ToString() +
                               "; this command buffer is recorded without rocm_cmdbuf");
    return false;
  };
  // XLA's nested command buffer (its create failed) in the library's primary.
  rcb::CmdBuf parent, lost;
  CHECK(create(true, &parent), "the library makes the primary");
  CHECK(gpu.SetFaults("hipGraphCreate:1"), "fault injection");
  CHECK(!create(false, &lost), "the injected fault fails the nested create");
  gpu.SetFaults("");
  auto xla_nested = [&](uint64_t dst, uint64_t src, CopyKernel*& k, std::vector<void*>& params) {
    void* g = hip.Graph();  // RocmCommandBuffer::Create, then CreateKernelNode
    k = new CopyKernel(dst, src);
    params = {&k->dst, &k->src, &k->bytes};
    hip.AddKernel(g, {}, HipGraphs::Kernel(copy, 256, params));
    return g;
  };
  CopyKernel* k1 = nullptr;
  std::vector<void*> p1;
  void* nested = xla_nested(b, a, k1, p1);
  rcb_node child = 0;
  OK(parent.AddChildGraph({}, nested, &child));  // CreateClonedChildNode: ChildGraph of XLA's
  CopyKernel after(c, b);
  rcb_node tail = 0;
  OK(parent.AddKernel({&child, 1}, after.Launch(copy), &tail));
  OK(parent.Finalize());
  gpu.Write(a, Pattern(11).data(), kBytes);
  OK(parent.Launch(gpu.stream()));
  gpu.Sync();
  CHECK_RESULT(Holds(gpu, c, 11), "XLA's nested command buffer in the library's primary");
  // The next record: a new nested command buffer of XLA's (c to b this time) updates the child.
  OK(parent.BeginUpdate());
  CopyKernel* k2 = nullptr;
  std::vector<void*> p2;
  void* nested2 = xla_nested(b, c, k2, p2);
  OK(parent.UpdateChildGraph(child, nested2));  // UpdateClonedChildNode: a raw child, updated so
  CopyKernel back(a, b);
  OK(parent.UpdateKernel(tail, back.Launch(copy)));
  OK(parent.Finalize());
  gpu.Write(c, Pattern(12).data(), kBytes);
  OK(parent.Launch(gpu.stream()));
  gpu.Sync();
  CHECK_RESULT(Holds(gpu, a, 12), "the library's primary updated with XLA's next nested command buffer");
  hip.Destroy(nested);
  hip.Destroy(nested2);
  delete k1;
  delete k2;

  // The library's nested command buffer in XLA's primary (its create failed).
  rcb::CmdBuf primary;
  CHECK(gpu.SetFaults("hipGraphCreate:1"), "fault injection");
  CHECK(!create(true, &primary), "the injected fault fails the primary create");
  gpu.SetFaults("");
  rcb::CmdBuf lib_nested;
  CHECK(create(false, &lib_nested), "the library makes the nested one");
  CopyKernel k3(b, a);
  rcb_node n3 = 0;
  OK(lib_nested.AddKernel({}, k3.Launch(copy), &n3));
  OK(lib_nested.Finalize());
  void* template_graph = nullptr;
  OK(lib_nested.Graph(&template_graph));  // NestedGraphForXla
  void* g = hip.Graph();
  void* xchild = hip.AddChild(g, {}, template_graph);  // RocmCommandBuffer::CreateClonedChildNode's hook
  CopyKernel k4(c, b);
  std::vector<void*> p4 = {&k4.dst, &k4.src, &k4.bytes};
  void* xtail = hip.AddKernel(g, {xchild}, HipGraphs::Kernel(copy, 256, p4));
  void* exec = hip.Instantiate(g);
  gpu.Write(a, Pattern(13).data(), kBytes);
  hip.Launch(gpu, exec);
  CHECK_RESULT(Holds(gpu, c, 13), "the library's nested command buffer in XLA's primary");
  // UpdateClonedChildNode's hook: a new nested command buffer of the library's (c to b).
  rcb::CmdBuf lib_nested2;
  CHECK(create(false, &lib_nested2), "the library makes the next nested one");
  CopyKernel k5(b, c);
  rcb_node n5 = 0;
  OK(lib_nested2.AddKernel({}, k5.Launch(copy), &n5));
  OK(lib_nested2.Finalize());
  OK(lib_nested2.Graph(&template_graph));
  hip.SetChild(exec, xchild, template_graph);
  CopyKernel k6(a, b);
  std::vector<void*> p6 = {&k6.dst, &k6.src, &k6.bytes};
  hip.SetKernel(exec, xtail, HipGraphs::Kernel(copy, 256, p6));
  gpu.Write(c, Pattern(14).data(), kBytes);
  hip.Launch(gpu, exec);
  CHECK_RESULT(Holds(gpu, a, 14), "XLA's primary updated with the library's next nested command buffer");
  hip.ExecDestroy(exec);
  hip.Destroy(g);
  CHECK(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kCreateCommandBuffer) == counted + 2,
        "%lld create fallbacks counted",
        static_cast<long long>(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kCreateCommandBuffer) - counted));
  const std::string error = LastError();
  CHECK(error.find("this command buffer is recorded without rocm_cmdbuf") != std::string::npos,
        "the first later-create fallback is an error saying what happens: %s", error.c_str());
  for (uint64_t p : {a, b, c}) gpu.Free(p);
  std::printf("a later create fails: that command buffer XLA's own, holding and held by the library's, exact\n");
}

// A library failure while a primary command buffer is updated or first finalized
// (RecordAgainIfFailed, 0005): the command buffer refuses launches and CommandBufferThunk
// records the execution from scratch into a new one (RecordInNewCommandBuffer), the library's;
// where the library fails that record too (its instantiation), once more into XLA's own.
// `stream`: the stream a traced command is captured on.
void RecordAgain(Gpu& gpu, void* copy, void* stream) {
  namespace se = created_first::stream_executor::gpu;
  HipGraphs hip(gpu);
  const int64_t counted = se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kRecordAgain);
  auto marked = [&](const rcb::Status& failed, const char* what) {
    CHECK(!failed.ok(), "%s: the injected fault did not fail the library", what);
    se::RocmCmdbufFellBack(se::RocmCmdbufFallback::kRecordAgain,
                           std::string(what) + ": " + failed.ToString() +
                               "; the command buffer is recorded again in a new one");
  };
  Chain chain(gpu, copy);
  auto record = [&](rcb::CmdBuf& cb) {
    OK(rcb::CmdBuf::Create(0, &cb));
    OK(cb.SetAllocations(chain.Table()));
    chain.Record(cb, false);
    return cb.Finalize();
  };
  {
    rcb::CmdBuf cb;
    OK(record(cb));
    CHECK_RESULT(chain.Run(cb, 21), "first execution");
    // The next execution moves every allocation and records the update; the library fails
    // the second kernel's update.
    chain.MoveAll();
    OK(cb.BeginUpdate());
    OK(cb.SetAllocations(chain.Table()));
    CHECK(gpu.SetFaults("hipGraphExecKernelNodeSetParams:2"), "fault injection");
    rcb::Status updated = chain.TryUpdate(cb);
    gpu.SetFaults("");
    marked(updated, "Failed to set kernel node params");
    // LaunchGraph refuses a marked command buffer; the thunk replaces it (the launch would
    // have run the second kernel's old parameters).
    rcb::CmdBuf fresh;
    OK(record(fresh));
    CHECK_RESULT(chain.Run(fresh, 22), "recorded again in a new command buffer after the failed update");
  }
  {
    // The first finalize fails (the library's instantiation), and so does the retry's: the
    // execution is recorded into XLA's own command buffer.
    rcb::CmdBuf cb, retry;
    CHECK(gpu.SetFaults("hipGraphInstantiate:1,hipGraphInstantiate:2"), "fault injection");
    rcb::Status finalized = record(cb);
    marked(finalized, "Failed to instantiate HIP graph");
    rcb::Status again = record(retry);
    gpu.SetFaults("");
    marked(again, "Failed to instantiate HIP graph");
    std::vector<rcb_allocation> table = chain.Table();
    void* g = hip.Graph();
    std::vector<std::unique_ptr<CopyKernel>> kernels;
    std::vector<std::vector<void*>> params;
    void* prev = nullptr;
    for (int i = 0; i < 3; ++i) {
      kernels.push_back(std::make_unique<CopyKernel>(table[i + 1].base, table[i].base));
      params.push_back({&kernels[i]->dst, &kernels[i]->src, &kernels[i]->bytes});
    }
    for (int i = 0; i < 3; ++i) {
      std::vector<void*> deps;
      if (prev != nullptr) deps.push_back(prev);
      prev = hip.AddKernel(g, deps, HipGraphs::Kernel(copy, 256, params[i]));
    }
    void* exec = hip.Instantiate(g);
    gpu.Write(table[0].base, Pattern(23).data(), kBytes);
    hip.Launch(gpu, exec);
    CHECK_RESULT(Holds(gpu, table[3].base, 23), "recorded into XLA's own command buffer after two failed finalizes");
    hip.ExecDestroy(exec);
    hip.Destroy(g);
  }
  {
    // A nested command buffer (a traced command's, a child's) whose refused node the library
    // will not take even as a raw child graph: the nested command buffer returns the error,
    // which fails the primary's record, and the thread's nested failure marks the primary; the
    // thunk records the execution into a new command buffer, whose nested one takes the node.
    std::vector<rcb_allocation> table = chain.Table();
    uint64_t out = gpu.Malloc(8), zero = 0;
    auto record = [&](rcb::CmdBuf& primary, rcb::CmdBuf& nested, const char* fault) -> rcb::Status {
      OK(rcb::CmdBuf::Create(0, &primary));
      OK(rcb::CmdBuf::CreateNested(0, &nested));
      WideKernel k(out, 51);
      rcb_node node = 0;
      rcb::Status refused = nested.AddKernel({}, k.Launch(gpu.Function("rcb_test_wide_args_u64")), &node);
      CHECK(refused.code() == RCB_STATUS_INVALID_ARGUMENT, "the wide kernel refused: %s", refused.ToString().c_str());
      // AddNative: the node as XLA builds it, in a graph of its own.
      void* graph = hip.Graph();
      hip.AddKernel(graph, {}, HipGraphs::Kernel(gpu.Function("rcb_test_wide_args_u64"), 1, k.params));
      if (fault != nullptr) CHECK(gpu.SetFaults(fault), "fault injection");
      rcb::Status added = nested.AddChildGraph({}, graph, &node);
      gpu.SetFaults("");
      hip.Destroy(graph);
      if (!added.ok()) return added;  // RecordAgainIfFailed of a nested command buffer
      OK(nested.Finalize());
      rcb_node child = 0;
      OK(primary.AddChild({}, nested, &child));
      CopyKernel copy_after(table[1].base, table[0].base);
      rcb_node last = 0;
      OK(primary.AddKernel({&child, 1}, copy_after.Launch(copy), &last));
      return primary.Finalize();
    };
    rcb::CmdBuf primary, nested;
    rcb::Status failed = record(primary, nested, "hipGraphAddChildGraphNode:1");
    marked(failed, "adding a kernel node as a child graph node, after the library refused it");
    rcb::CmdBuf fresh, fresh_nested;
    OK(record(fresh, fresh_nested, nullptr));
    gpu.Write(out, &zero, 8);
    gpu.Write(table[0].base, Pattern(24).data(), kBytes);
    OK(fresh.Launch(gpu.stream()));
    gpu.Sync();
    uint64_t wrote = 0;
    gpu.Read(&wrote, out, 8);
    CHECK_RESULT(wrote == 51 && Holds(gpu, table[1].base, 24),
                 "a nested command buffer's failure: recorded again in a new command buffer (%llu)",
                 static_cast<unsigned long long>(wrote));
    gpu.Free(out);
  }
  {
    // A traced command (XLA's CommandBuffer::Trace into a nested command buffer) whose capture
    // the library cannot begin, or end: the nested command buffer returns the error, which fails
    // the record of the primary around it and marks that primary (the thread's record,
    // ScopedRocmCmdbufRecord); the execution is recorded into a new command buffer, whose traced
    // command captures in → a → b.
    std::vector<rcb_allocation> table = chain.Table();
    auto record = [&](rcb::CmdBuf& primary, rcb::CmdBuf& nested, const char* fault) -> rcb::Status {
      OK(rcb::CmdBuf::Create(0, &primary));
      OK(rcb::CmdBuf::CreateNested(0, &nested));
      if (fault != nullptr) CHECK(gpu.SetFaults(fault), "fault injection");
      rcb::Status traced = nested.CaptureBegin(stream);
      if (traced.ok()) {
        CopyArgs ia{table[1].base, table[0].base, kBytes}, ab{table[2].base, table[1].base, kBytes};
        gpu.LaunchPacked(copy, 1, 256, &ia, sizeof ia, stream);
        gpu.LaunchPacked(copy, 1, 256, &ab, sizeof ab, stream);
        traced = nested.CaptureEnd();
      }
      gpu.SetFaults("");
      if (!traced.ok()) return traced;  // RecordAgainIfFailed of the nested command buffer
      OK(nested.Finalize());
      rcb_node child = 0, last = 0;
      OK(primary.AddChild({}, nested, &child));
      CopyKernel to_out(table[3].base, table[2].base);
      OK(primary.AddKernel({&child, 1}, to_out.Launch(copy), &last));
      return primary.Finalize();
    };
    const struct {
      const char* fault;
      const char* what;
    } capture_faults[] = {{"hipStreamBeginCapture:1", "Failed to begin stream capture"},
                          {"hipStreamEndCapture:1", "Failed to end stream capture"}};
    for (const auto& failure : capture_faults) {
      {
        // Freed with the failed record, as XLA frees the nested command buffer whose Trace
        // failed: a capture whose end failed is ended by the free.
        rcb::CmdBuf primary, nested;
        marked(record(primary, nested, failure.fault), failure.what);
      }
      rcb::CmdBuf fresh, fresh_nested;
      OK(record(fresh, fresh_nested, nullptr));
      CHECK_RESULT(chain.Run(fresh, 26), "a traced command whose capture failed (%s): recorded again in a new "
                   "command buffer", failure.fault);
    }
  }
  {
    // A launch the library fails (rcb_cmdbuf_launch: the runtime's graph launch fails, which
    // may have queued part of its work, so LaunchEnqueuedNothing is false): that execution's
    // error, as XLA's failed hipGraphLaunch is, and the command buffer marked; the next
    // execution records its commands from scratch into a new one.
    rcb::CmdBuf cb;
    OK(record(cb));
    CHECK(gpu.SetFaults("hipGraphLaunch:1"), "fault injection");
    rcb::Status launched = cb.Launch(gpu.stream());
    gpu.SetFaults("");
    marked(launched, "Failed to launch HIP graph");
    CHECK_CONTRACT(!stream_executor::gpu::rocm_cmdbuf::LaunchEnqueuedNothing(launched),
                   "a failed graph launch (%s) taken as enqueueing nothing", launched.ToString().c_str());
    rcb::CmdBuf fresh;
    OK(record(fresh));
    CHECK_RESULT(chain.Run(fresh, 25), "recorded again at the next execution after a failed launch");
  }
  {
    // A launch the library refuses before enqueueing anything (rcb_cmdbuf_launch on nodes that
    // a move failing part-way left unsent: RCB_STATUS_INVALID_STATE, LaunchEnqueuedNothing):
    // nothing of the execution ran, so CommandBufferThunk::SubmitOrRecordAgain records it from
    // scratch into a new command buffer and launches that one in the same execution.
    rcb::CmdBuf cb;
    OK(record(cb));
    CHECK_RESULT(chain.Run(cb, 27), "first execution");
    MoveHalfWay(gpu, chain, cb);
    chain.Fill(28);
    rcb::Status launched = cb.Launch(gpu.stream());
    marked(launched, "Failed to launch HIP graph");
    CHECK_CONTRACT(stream_executor::gpu::rocm_cmdbuf::LaunchEnqueuedNothing(launched),
                   "a launch refused before the runtime (%s) not taken as enqueueing nothing",
                   launched.ToString().c_str());
    gpu.Sync();
    CHECK_CONTRACT(chain.Holds(0), "the refused launch ran");
    rcb::CmdBuf fresh;
    OK(record(fresh));
    OK(fresh.Launch(gpu.stream()));
    gpu.Sync();
    CHECK_RESULT(chain.Holds(28), "a refused launch: recorded again and launched in the same execution");
  }
  CHECK(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kRecordAgain) == counted + 8,
        "%lld record-again fallbacks counted",
        static_cast<long long>(se::RocmCmdbufFallbackCount(se::RocmCmdbufFallback::kRecordAgain) - counted));
  std::printf("record again: a failed update, finalize, nested command buffer (a refused node, a capture's "
              "begin or end) recorded into a new command buffer, then XLA's own, a failed launch at the next "
              "execution, and a launch refused before anything was enqueued in the same execution, exact\n");
}

// A command buffer whose commands hold a collective (CommandsHoldCollectives, 0005) is XLA's own
// from the start: CommandBufferThunk creates it with rocm_cmdbuf off for the thread
// (ScopedXlaOwnIfCollectives), so RocmExecutor::CreateCommandBuffer's hook (RocmCmdbufRequested,
// which reads CurrentRocmCmdbufOptions().command_buffers) never asks the library, and records it
// the same way (ScopedXlaOwnRecord), so its nested command buffers are XLA's own too: no failure
// of the library can reach it, and it is never recorded again on one rank alone. XLA's
// RocmCommandBuffer records it with the HIP graph API alone: in → a, the traced command
// (a → b → c, traced again for every new address set, as XLA's TracedCommandBuffer does) a child
// graph node, c → out; every move updated in the executable graph (kernel and child graph node
// setters), each step exact, no fallback counted.
void HoldsCollectives(Gpu& gpu, void* copy) {
  namespace se = stream_executor::gpu;
  se::RocmCmdbufOptions module;
  module.command_buffers = module.update_in_place = module.trace_cache = module.flatten_traced = true;
  se::ScopedRocmCmdbufOptions for_the_module(module);
  std::vector<long long> counted;
  for (se::RocmCmdbufFallback kind : {se::RocmCmdbufFallback::kCreateCommandBuffer, se::RocmCmdbufFallback::kNode,
                                      se::RocmCmdbufFallback::kTraceCache, se::RocmCmdbufFallback::kRecordAgain}) {
    counted.push_back(se::RocmCmdbufFallbackCount(kind));
  }
  const uint64_t graphs = gpu.LiveCount("graph"), execs = gpu.LiveCount("exec");
  {
    const se::RocmCmdbufOptions off{};
    se::ScopedRocmCmdbufOptions xla_own(off);
    CHECK(!se::CurrentRocmCmdbufOptions().command_buffers,
          "holding a collective: the library asked to create its command buffer");
    HipGraphs hip(gpu);
    std::vector<uint64_t> addr(5);
    for (uint64_t& p : addr) p = gpu.Malloc(kBytes);
    std::vector<uint64_t> retired;
    uint64_t bytes = kBytes;
    // RocmCommandBuffer's kernel node: kernelParams pointing at the packed arguments.
    auto copy_params = [&](uint64_t& dst, uint64_t& src) {
      return std::vector<void*>{&dst, &src, &bytes};
    };
    // The traced command, as its trace captures it: a → b → c.
    auto traced = [&]() {
      void* g = hip.Graph();
      std::vector<void*> ab = copy_params(addr[2], addr[1]), bc = copy_params(addr[3], addr[2]);
      void* first = hip.AddKernel(g, {}, HipGraphs::Kernel(copy, 256, ab));
      hip.AddKernel(g, {first}, HipGraphs::Kernel(copy, 256, bc));
      return g;
    };
    void* graph = hip.Graph();
    std::vector<void*> in_a = copy_params(addr[1], addr[0]), c_out = copy_params(addr[4], addr[3]);
    void* first = hip.AddKernel(graph, {}, HipGraphs::Kernel(copy, 256, in_a));
    void* child_graph = traced();
    void* child = hip.AddChild(graph, {first}, child_graph);
    hip.Destroy(child_graph);
    void* last = hip.AddKernel(graph, {child}, HipGraphs::Kernel(copy, 256, c_out));
    void* exec = hip.Instantiate(graph);
    auto run = [&](uint32_t seed) {
      gpu.Write(addr[0], Pattern(seed).data(), kBytes);
      for (size_t i = 1; i < addr.size(); ++i) gpu.Write(addr[i], Pattern(0).data(), kBytes);
      hip.Launch(gpu, exec);
      return Holds(gpu, addr[4], seed);
    };
    CHECK_RESULT(run(1), "holding a collective: first execution");
    for (uint32_t step = 2; step <= 4; ++step) {
      for (uint64_t& p : addr) {
        retired.push_back(p);
        p = gpu.Malloc(kBytes);
      }
      in_a = copy_params(addr[1], addr[0]);
      c_out = copy_params(addr[4], addr[3]);
      hip.SetKernel(exec, first, HipGraphs::Kernel(copy, 256, in_a));
      void* again = traced();
      hip.SetChild(exec, child, again);
      hip.Destroy(again);
      hip.SetKernel(exec, last, HipGraphs::Kernel(copy, 256, c_out));
      CHECK_RESULT(run(step), "holding a collective: step %u, every allocation moved", step);
    }
    hip.ExecDestroy(exec);
    hip.Destroy(graph);
    for (uint64_t p : addr) gpu.Free(p);
    for (uint64_t p : retired) gpu.Free(p);
  }
  CHECK(se::CurrentRocmCmdbufOptions().command_buffers, "the module's options are not restored");
  size_t i = 0;
  for (se::RocmCmdbufFallback kind : {se::RocmCmdbufFallback::kCreateCommandBuffer, se::RocmCmdbufFallback::kNode,
                                      se::RocmCmdbufFallback::kTraceCache, se::RocmCmdbufFallback::kRecordAgain}) {
    CHECK(se::RocmCmdbufFallbackCount(kind) == counted[i++], "holding a collective: a fallback counted");
  }
  CHECK(gpu.LiveCount("graph") == graphs && gpu.LiveCount("exec") == execs,
        "holding a collective: graphs or executable graphs left behind");
  std::printf("holding a collective: XLA's own command buffer (the library not asked), every move updated, "
              "exact\n");
}

}  // namespace

int main() {
  if (!stream_executor::gpu::LoadRocmCmdbuf("--xla_gpu_rocm_cmdbuf")) {
    std::fprintf(stderr, "xla_flow fallbacks: %s\n", LastError().c_str());
    return FailureStatus();
  }
  Gpu gpu;
  Announce("xla_flow fallbacks");
  if (!gpu.SetFaults("")) {
    Skipped("every fallback", "needs the software GPU's fault injection");
    return Finish("xla_flow fallbacks");
  }
  void* copy = gpu.Function("rcb_test_copy_u8");
  void* sleep = gpu.Function("rcb_test_sleep");
  void* stream = gpu.NewStream();
  CreateOnce(gpu, copy);
  RefusedNodes(gpu, copy, gpu.Function("rcb_test_wide_args_u64"));
  LaterCreateFails(gpu, copy);
  RecordAgain(gpu, copy, stream);
  FailedMove(gpu, copy);
  RefusedTable(gpu, copy);
  FailedFlattenedUpdate(gpu, copy, sleep, "hipGraphExecKernelNodeSetParams:2", "an exec setter fails part-way");
  FailedFlattenedUpdate(gpu, copy, sleep, nullptr, "captured again with another shape");
  HoldsCollectives(gpu, copy);
  Streams(gpu, copy);
  TraceCacheAndFlatten(gpu, copy, stream);
  VmmPool(gpu, copy, sleep, stream);
  return Finish("xla_flow fallbacks");
}
