// Replays, through include/rocm_cmdbuf.hpp, what xla-patches/0005 makes XLA's ROCm streams do
// with --xla_gpu_rocm_cmdbuf_stream_cache, on the software GPU or, with RCB_BACKEND=cuda, on an
// NVIDIA GPU: rocm_stream.cc's CreateStream becomes rcb::StreamAcquire(device,
// hipStreamDefault, priority); ~RocmStream synchronizes the stream (BlockHostUntilDone) and
// DestroyStream gives it back with rcb::StreamReleaseIdle when that succeeded (no stream query)
// and with rcb::StreamRelease when it failed.
//
// A PJRT client creates its streams (compute, host-to-device, device-to-host, device-to-device,
// and a pool of extra compute streams at two priorities), uses them, and is destroyed; a job
// that creates clients again and again (a test suite, a notebook) repeats that. Seven clients of
// 16 streams each are 112 streams: the first client creates 16, every later one reuses them.
// Each stream runs a kernel whose result is checked, so a reused stream is proven usable; on the
// software GPU no release makes a hipStreamQuery. A stream whose synchronize failed (injected on
// the software GPU) goes back through the query while still busy: destroyed, not kept. At the
// end a trim leaves nothing.
#include <cstdint>
#include <cstdio>
#include <set>
#include <vector>

#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"

namespace {

constexpr int kClients = 7;
constexpr int kStreamsPerClient = 16;
constexpr uint64_t kN = 256;

struct CopyArgs {
  uint64_t dst, src, bytes;
};

rcb_stream_stats Stats() {
  rcb_stream_stats s{};
  OK(rcb::StreamCacheStats(-1, &s));
  return s;
}

// ~RocmStream with the flag: BlockHostUntilDone, then DestroyStream's
// ReleaseRocmCmdbufStream(stream, synchronized).
void DestroyRocmStream(Gpu& gpu, void* stream) {
  const bool synchronized = gpu.SyncStatus(stream) == 0;
  OK(synchronized ? rcb::StreamReleaseIdle(stream) : rcb::StreamRelease(stream));
}

}  // namespace

int main() {
  Gpu gpu;
  Announce("xla_flow streams");
  void* copy = gpu.Function("rcb_test_copy_u8");
  void* sleep = gpu.Function("rcb_test_sleep");
  OK(rcb::StreamCacheTrim(-1));
  rcb_stream_stats start = Stats();
  uint64_t live_start = gpu.LiveCount("stream");
  uint64_t creates_start = gpu.CallCount("hipStreamCreateWithPriority");
  uint64_t queries_start = gpu.CallCount("hipStreamQuery");

  uint64_t src = gpu.Malloc(kN * 4), dst = gpu.Malloc(kN * 4);
  std::set<void*> first_client;
  for (int client = 0; client < kClients; ++client) {
    std::vector<void*> streams;
    for (int i = 0; i < kStreamsPerClient; ++i) {
      // The extra compute streams ask for the highest priority (-1 on both runtimes' ranges).
      int priority = i < kStreamsPerClient / 2 ? 0 : -1;
      void* s = nullptr;
      OK(rcb::StreamAcquire(0, /*hipStreamDefault=*/0, priority, &s));
      streams.push_back(s);
      if (client == 0) first_client.insert(s);
      CHECK(client == 0 || first_client.count(s) == 1, "client %d got a stream the first client never had",
            client);
    }
    CHECK_CONTRACT(std::set<void*>(streams.begin(), streams.end()).size() == streams.size(),
          "client %d got one stream twice", client);
    for (size_t i = 0; i < streams.size(); ++i) {
      std::vector<uint32_t> in(kN, static_cast<uint32_t>(client * 100 + i)), out(kN, 0);
      gpu.Write(src, in.data(), kN * 4);
      CopyArgs args{dst, src, kN * 4};
      gpu.LaunchPacked(copy, 1, 256, &args, sizeof args, streams[i]);
      gpu.Sync(streams[i]);
      gpu.Read(out.data(), dst, kN * 4);
      CHECK_RESULT(out == in, "client %d stream %zu: the copy did not run", client, i);
    }
    for (void* s : streams) DestroyRocmStream(gpu, s);
  }
  rcb_stream_stats after = Stats();
  uint64_t hits = after.hits - start.hits, misses = after.misses - start.misses;
  std::printf("%d clients x %d streams: %llu created, %llu reused", kClients, kStreamsPerClient,
              static_cast<unsigned long long>(misses), static_cast<unsigned long long>(hits));
  if (!gpu.cuda()) {
    std::printf(" (hipStreamCreateWithPriority: %llu calls; %d without the cache; hipStreamQuery: %llu calls)",
                static_cast<unsigned long long>(gpu.CallCount("hipStreamCreateWithPriority") - creates_start),
                kClients * kStreamsPerClient,
                static_cast<unsigned long long>(gpu.CallCount("hipStreamQuery") - queries_start));
  }
  std::printf("\n");
  if (gpu.cuda()) Skipped("the runtime's stream creations, queries and live streams", "the software GPU's call counters");
  const uint64_t queries = gpu.CallCount("hipStreamQuery") - queries_start;
  CHECK(queries == 0, "%llu hipStreamQuery calls for streams released after a good synchronize",
        static_cast<unsigned long long>(queries));
  CHECK(misses == kStreamsPerClient, "%llu streams created", static_cast<unsigned long long>(misses));
  CHECK(hits == (kClients - 1) * kStreamsPerClient, "%llu streams reused", static_cast<unsigned long long>(hits));
  CHECK(after.kept == kStreamsPerClient && after.in_use == 0, "kept %llu, in use %llu",
        static_cast<unsigned long long>(after.kept), static_cast<unsigned long long>(after.in_use));

  // A stream whose synchronize failed goes back through the query, which finds its work still
  // running: destroyed, not handed to the next client. On the software GPU the synchronize is
  // made to fail; elsewhere it is left out, and the release is the one that follows a failure.
  void* busy = nullptr;
  OK(rcb::StreamAcquire(0, 0, 0, &busy));
  uint64_t us = 200000;
  gpu.LaunchPacked(sleep, 1, 1, &us, sizeof us, busy);
  const uint64_t queries_before = gpu.CallCount("hipStreamQuery");
  if (gpu.SetFaults("hipStreamSynchronize:1")) {
    DestroyRocmStream(gpu, busy);
  } else {
    OK(rcb::StreamRelease(busy));
  }
  rcb_stream_stats released = Stats();
  // It came from the cache (a hit) and did not go back.
  CHECK(released.destroyed == after.destroyed + 1 && released.kept == after.kept - 1,
        "a busy stream was kept (destroyed %llu -> %llu)", static_cast<unsigned long long>(after.destroyed),
        static_cast<unsigned long long>(released.destroyed));
  CHECK(gpu.cuda() || gpu.CallCount("hipStreamQuery") == queries_before + 1, "the busy stream was not queried");

  OK(rcb::StreamCacheTrim(-1));
  CHECK(Stats().kept == 0, "streams kept after a trim");
  gpu.Sync();
  CHECK(gpu.cuda() || gpu.LiveCount("stream") == live_start, "%llu streams live, %llu before",
        static_cast<unsigned long long>(gpu.LiveCount("stream")), static_cast<unsigned long long>(live_start));
  gpu.Free(src);
  gpu.Free(dst);
  return Finish("xla_flow streams");
}
