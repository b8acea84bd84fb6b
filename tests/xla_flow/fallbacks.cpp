// Replays, through include/rocm_cmdbuf.hpp, the fallbacks of the patch series (issue: every
// library failure in a hook falls back to XLA's own path for that call), with the software GPU's
// fault injection making the library's call fail, and checks that XLA's path then gives exact
// results and leaves nothing behind:
//   0005 rocm_stream.cc: a failed rcb::StreamAcquire makes XLA create the stream itself
//        (hipStreamCreateWithPriority); giving that stream back to the cache is
//        RCB_STATUS_INVALID_HANDLE with the stream untouched, so XLA destroys it (no double
//        destroy, no leak);
//   0005 RocmCmdbufTraceCache::GetOrTrace: a failed get (the capture's end fails) returns
//        nullptr and XLA traces the command itself into a nested command buffer (Trace:
//        CaptureBegin/CaptureEnd), recorded as a cloned child;
//   0005 CreateClonedChildNode: a failed flatten becomes one cloned child node (AddChildGraph);
//   0007 RocmCmdbufVmmPool::Execute: a slot whose stream-ordered acquire fails runs that
//        execution without the pool; a copy the pool cannot enqueue is made by the stream.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"

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

struct Trace {
  Gpu* gpu;
  void* copy;
  CopyArgs args;
};

int32_t TraceFn(void* user_data, void* stream) {
  auto* t = static_cast<Trace*>(user_data);
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
  gpu.Free(src);
  gpu.Free(dst);
}

void VmmPool(Gpu& gpu, void* copy, void* sleep, void* stream) {
  const std::vector<uint64_t> sizes = {kBytes};
  rcb_vmm_pool_config config{};
  config.device = 0;
  config.backing = RCB_VMM_BACKING_DEVICE;
  config.num_slots = 1;
  config.num_buffers = 1;
  config.buffer_sizes = sizes.data();
  rcb::VmmPool pool;
  OK(rcb::VmmPool::Create(config, &pool));
  uint64_t in = gpu.Malloc(kBytes), out = gpu.Malloc(kBytes);
  void* other = gpu.NewStream();
  for (uint32_t step = 1; step <= 3; ++step) {
    gpu.Write(in, Pattern(step).data(), kBytes);
    gpu.Write(out, Pattern(0).data(), kBytes);
    // Step 2: the slot is still in use on the GPU and the stream's wait cannot be enqueued;
    // step 3: the pool cannot enqueue its copies.
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
    rcb::Status acquired = pool.AcquireOnStream(stream, &slot);
    gpu.SetFaults("");
    CHECK(acquired.ok() == (step != 2), "step %u: acquire: %s", step, acquired.ToString().c_str());
    if (!acquired.ok()) {
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
      OK(pool.Release(slot, stream));
    }
    CHECK(gpu.SyncStatus(stream) == 0, "step %u", step);
    CHECK_RESULT(Holds(gpu, out, step), "step %u: the live-out at the caller's address", step);
  }
  CHECK(gpu.SyncStatus(other) == 0, "the other execution");
  OK(pool.Free());
  gpu.Free(in);
  gpu.Free(out);
}

}  // namespace

int main() {
  Gpu gpu;
  Announce("xla_flow fallbacks");
  if (!gpu.SetFaults("")) {
    Skipped("every fallback", "needs the software GPU's fault injection");
    return Finish("xla_flow fallbacks");
  }
  void* copy = gpu.Function("rcb_test_copy_u8");
  void* sleep = gpu.Function("rcb_test_sleep");
  void* stream = gpu.NewStream();
  Streams(gpu, copy);
  TraceCacheAndFlatten(gpu, copy, stream);
  VmmPool(gpu, copy, sleep, stream);
  return Finish("xla_flow fallbacks");
}
