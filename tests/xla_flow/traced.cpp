// Replays, through include/rocm_cmdbuf.hpp, what xla-patches/0005 makes XLA do with traced
// commands, on the software GPU or, with RCB_BACKEND=cuda, on an NVIDIA GPU:
//
//   * PlatformTraceCache (--xla_gpu_rocm_cmdbuf_trace_cache): one rcb::TraceCache per traced
//     command and command buffer, created by RocmCmdbufCommandBuffer::CreateTraceCache with
//     --xla_cmd_buffer_trace_cache_size (16); the key is the command's buffer allocations, each
//     once, by index; the trace function issues the command on the capturing stream;
//   * RocmCmdbufCommandBuffer::CreateClonedChildNode / UpdateClonedChildNode of the traced graph:
//     AddFlattenedChild / UpdateFlattenedChild with --xla_gpu_rocm_cmdbuf_flatten_traced, else
//     AddChildGraph / UpdateChildGraph;
//   * CommandBufferThunk (xla-patches/0004): the allocations that moved become MoveAllocations;
//     when the library refuses, the RecordUpdate path (BeginUpdate, the new table, every command
//     updated, Finalize).
//
// Two traced commands, a GEMM-like one (copy, axpy) and a collective-like one (copy, axpy, on
// other buffers), sit between two kernels. Each of 20 steps moves allocations, writes new inputs
// and garbage outputs, then checks the outputs exactly. The software GPU makes each end of a
// capture cost 250 ms (HIPSIM_LATENCY), and the flow asserts at most one capture per traced
// command: from the library's process counters (rcb_counters_get), from the trace functions' own
// call counts and, on the software GPU, from its count of hipStreamEndCapture. A collective whose key names an allocation no node holds is captured again
// for every new address set, and its results still checked.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"

namespace {

constexpr uint64_t kN = 256;  // floats per allocation
constexpr uint64_t kBytes = kN * 4;
constexpr int kAllocs = 6;
constexpr int kSteps = 20;
constexpr size_t kTraceCacheSize = 16;  // --xla_cmd_buffer_trace_cache_size's default

Gpu* gpu;
struct Kernels {
  void* axpy;
  void* add;
  void* copy;
} k;

// Arguments packed as the kernels take them (natural alignment, no tail padding).
struct AxpyArgs {
  uint64_t y, x;
  float a;
  uint32_t pad;
  uint64_t n;
};
struct CopyArgs {
  uint64_t dst, src, bytes;
};

// What XLA's executable holds: allocation i lives at addr[i]; a move takes fresh memory. Each
// buffer is twice the allocation, so that none begins where another ends, as on the software GPU
// (a real runtime packs small buffers end to end, and a captured kernel's pointer at one
// allocation's base could then be the end of the one before it: a relocation that parts them is
// refused, and the command captured again; docs/flatten-and-trace-cache.md has what that costs).
constexpr uint64_t kBuffer = 2 * kBytes;
struct Buffers {
  std::vector<uint64_t> addr;
  std::vector<uint64_t> retired;
  Buffers() {
    for (int i = 0; i < kAllocs; ++i) addr.push_back(gpu->Malloc(kBuffer));
  }
  ~Buffers() {
    for (uint64_t p : addr) gpu->Free(p);
    for (uint64_t p : retired) gpu->Free(p);
  }
  std::vector<rcb_allocation> Table() const {
    std::vector<rcb_allocation> t;
    for (uint64_t a : addr) t.push_back({a, kBytes});
    return t;
  }
};

// A traced command: the allocations it uses (its buffer uses' unique indices, sorted, as
// PlatformTraceCache keys them) and what it issues on the capturing stream.
struct Traced {
  const char* name;
  std::vector<int> uses;
  void (*issue)(const Buffers&);
  int traces = 0;
  const Buffers* buffers = nullptr;
};

// GEMM-like: a2 = a1; a2 += 3 * a0.
void IssueGemm(const Buffers& b) {
  CopyArgs c{b.addr[2], b.addr[1], kBytes};
  gpu->LaunchPacked(k.copy, 1, 256, &c, sizeof c);
  AxpyArgs a{b.addr[2], b.addr[0], 3.0f, 0, kN};
  gpu->LaunchPacked(k.axpy, 1, 256, &a, sizeof a);
}

// Collective-like: a3 = a2; a3 += 0.5 * a2.
void IssueCollective(const Buffers& b) {
  CopyArgs c{b.addr[3], b.addr[2], kBytes};
  gpu->LaunchPacked(k.copy, 1, 256, &c, sizeof c);
  AxpyArgs a{b.addr[3], b.addr[2], 0.5f, 0, kN};
  gpu->LaunchPacked(k.axpy, 1, 256, &a, sizeof a);
}

int32_t TraceFn(void* user_data, void*) {
  auto* t = static_cast<Traced*>(user_data);
  ++t->traces;
  t->issue(*t->buffers);
  return 0;
}

rcb_counters Counters() {
  rcb_counters c{};
  c.struct_size = sizeof c;
  OK(rcb::CountersGet(nullptr, &c));
  return c;
}

rcb_kernel_launch Launch(void* f, const rcb_kernel_arg* args, size_t n) {
  return rcb_kernel_launch{sizeof(rcb_kernel_launch), f, {1, 1, 1}, {256, 1, 1}, 0, args, n};
}

struct Options {
  const char* name;
  bool flatten;
  // A kernel node added with kernelParams (sizes unknown to XLA): its references are unknown,
  // so every move is refused and each step goes through RecordUpdate.
  bool kernel_params_node;
  // The collective's key holds an allocation none of its nodes names (as RCCL's work queue in
  // device memory holds a collective's buffer addresses): the library must capture it again
  // for new addresses rather than relocate it.
  bool hidden_allocation = false;
};

// The command buffer thunk over: add(a1 = a0 + a0) → gemm → collective → add(a4 = a3 + a0)
// [→ kernelParams add(a5 = a4 + a0)].
class Flow {
 public:
  Flow(Options o, Buffers& b) : o_(o), b_(b) {
    OK(rcb::TraceCache::Create(kTraceCacheSize, &gemm_cache_));
    OK(rcb::TraceCache::Create(kTraceCacheSize, &coll_cache_));
    gemm_.buffers = coll_.buffers = &b_;
    if (o_.hidden_allocation) coll_.uses.push_back(5);
    OK(rcb::CmdBuf::Create(0, &cb_));
    OK(cb_.SetAllocations(b_.Table()));
    Record(false);
    OK(cb_.Finalize());
  }

  // One execution: the thunk's move, or the RecordUpdate fallback. Returns true when in place.
  bool Execute(const std::vector<rcb_allocation_move>& moves) {
    rcb_update_report report{};
    OK(cb_.MoveAllocations(moves, &report));
    bool in_place = report.needs_rerecord == 0;
    if (!in_place) {
      OK(cb_.BeginUpdate());
      OK(cb_.SetAllocations(b_.Table()));
      Record(true);
      OK(cb_.Finalize());
    }
    OK(cb_.Launch(gpu->stream()));
    return in_place;
  }

  int GemmTraces() const { return gemm_.traces; }
  int CollectiveTraces() const { return coll_.traces; }

 private:
  void Record(bool update) {
    uint64_t n = kN;
    uint64_t a0 = b_.addr[0], a1 = b_.addr[1], a3 = b_.addr[3], a4 = b_.addr[4], a5 = b_.addr[5];
    rcb_kernel_arg add1[] = {{&a1, 8, RCB_ARG_DEVICE_PTR}, {&a0, 8, RCB_ARG_DEVICE_PTR},
                             {&a0, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    rcb_kernel_arg add4[] = {{&a4, 8, RCB_ARG_DEVICE_PTR}, {&a3, 8, RCB_ARG_DEVICE_PTR},
                             {&a0, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    if (update) {
      OK(cb_.UpdateKernel(k1_, Launch(k.add, add1, 4)));
    } else {
      OK(cb_.AddKernel({}, Launch(k.add, add1, 4), &k1_));
    }
    RecordTraced(gemm_cache_, gemm_, update, {k1_}, &t1_);
    RecordTraced(coll_cache_, coll_, update, {t1_}, &t2_);
    if (update) {
      OK(cb_.UpdateKernel(k2_, Launch(k.add, add4, 4)));
    } else {
      OK(cb_.AddKernel({t2_}, Launch(k.add, add4, 4), &k2_));
    }
    if (!o_.kernel_params_node) return;
    // RocmCmdbufCommandBuffer passes KernelArgsPackedArray's pointers when sizes are unknown.
    void* params[] = {&a5, &a4, &a0, &n};
    rcb_kernel_params_launch launch{sizeof(rcb_kernel_params_launch), k.add, {1, 1, 1}, {256, 1, 1}, 0, params};
    if (update) {
      OK(cb_.UpdateKernelParams(k3_, launch));
    } else {
      OK(cb_.AddKernelParams({k2_}, launch, &k3_));
    }
  }

  // PlatformTraceCache::GetOrTrace, then RecordNestedCommand.
  void RecordTraced(rcb::TraceCache& cache, Traced& t, bool update, std::vector<rcb_node> deps,
                    rcb_node* node) {
    std::vector<rcb_allocation> key;
    for (int i : t.uses) key.push_back({b_.addr[i], kBytes});
    void* graph = nullptr;
    uint32_t outcome = 0;
    OK(cache.GetOrTrace(gpu->stream(), key, TraceFn, &t, &graph, &outcome));
    if (o_.flatten) {
      rcb_flatten_report report{};
      if (update) {
        OK(cb_.UpdateFlattenedChild(*node, nullptr, graph, &report));
      } else {
        OK(cb_.AddFlattenedChild(deps, nullptr, graph, node, &report));
      }
      CHECK(report.flattened == 1, "%s: %s", t.name, report.reason);
    } else if (update) {
      OK(cb_.UpdateChildGraph(*node, graph));
    } else {
      OK(cb_.AddChildGraph(deps, graph, node));
    }
  }

  Options o_;
  Buffers& b_;
  rcb::CmdBuf cb_;
  rcb::TraceCache gemm_cache_, coll_cache_;
  Traced gemm_{"gemm", {0, 1, 2}, IssueGemm};
  Traced coll_{"collective", {2, 3}, IssueCollective};
  rcb_node k1_ = 0, t1_ = 0, t2_ = 0, k2_ = 0, k3_ = 0;
};

std::vector<float> Read(uint64_t p) {
  std::vector<float> v(kN);
  gpu->Read(v.data(), p, kBytes);
  return v;
}

void Run(const Options& o) {
  Buffers b;
  std::mt19937 rng(7);
  uint64_t captures_before = gpu->CallCount("hipStreamEndCapture");
  rcb_counters before = Counters();
  Flow flow(o, b);
  int in_place = 0;
  for (int step = 0; step < kSteps; ++step) {
    // A BFC-like allocator moved some allocations (at least one of each traced command's).
    std::vector<rcb_allocation_move> moves;
    for (int i = 0; i < kAllocs; ++i) {
      if (i != 0 && i != 3 && rng() % 2 == 0) continue;
      b.retired.push_back(b.addr[i]);
      b.addr[i] = gpu->Malloc(kBuffer);
      moves.push_back({static_cast<uint64_t>(i), b.addr[i]});
    }
    std::vector<float> input(kN), garbage(kN, -12345.0f);
    for (float& x : input) x = static_cast<float>(rng() % 1000);
    gpu->Write(b.addr[0], input.data(), kBytes);
    for (int i = 1; i < kAllocs; ++i) gpu->Write(b.addr[i], garbage.data(), kBytes);
    in_place += flow.Execute(moves) ? 1 : 0;
    gpu->Sync();
    // Integers below 2^20 times these factors are exact in float, whatever the rounding mode.
    std::vector<float> a2 = Read(b.addr[2]), a4 = Read(b.addr[4]), a5 = Read(b.addr[5]);
    bool exact = true;
    for (uint64_t j = 0; j < kN; ++j) {
      exact &= a2[j] == 5.0f * input[j] && a4[j] == 8.5f * input[j];
      if (o.kernel_params_node) exact &= a5[j] == 9.5f * input[j];
    }
    CHECK_RESULT(exact, "%s: step %d: outputs differ from the inputs' expected multiples", o.name, step);
  }
  uint64_t captures = gpu->CallCount("hipStreamEndCapture") - captures_before;
  rcb_counters after = Counters();
  uint64_t counted = after.captures - before.captures;
  uint64_t relocations = after.relocations - before.relocations;
  uint64_t hits = after.trace_hits - before.trace_hits;
  int traces = flow.GemmTraces() + flow.CollectiveTraces();
  std::printf("%s: %d steps, %d moved in place, %d recorded again; %d trace(s); counters: %llu captures, "
              "%llu relocations, %llu hits",
              o.name, kSteps, in_place, kSteps - in_place, traces, static_cast<unsigned long long>(counted),
              static_cast<unsigned long long>(relocations), static_cast<unsigned long long>(hits));
  if (!gpu->cuda()) std::printf(", %llu hipStreamEndCapture", static_cast<unsigned long long>(captures));
  std::printf("\n");
  if (gpu->cuda()) Skipped("the number of captures", "the software GPU's call counters");
  // Allocation 3, which the collective uses, moves at every step.
  int expected = o.hidden_allocation ? 1 + 1 + kSteps : 2;
  CHECK(flow.GemmTraces() == 1, "%s: the GEMM was traced %d times", o.name, flow.GemmTraces());
  CHECK(traces == expected, "%s: %d traces, expected %d", o.name, traces, expected);
  CHECK(gpu->cuda() || captures == static_cast<uint64_t>(expected), "%s: %llu captures", o.name,
        static_cast<unsigned long long>(captures));
  CHECK(counted == static_cast<uint64_t>(expected), "%s: the library counted %llu captures", o.name,
        static_cast<unsigned long long>(counted));
  bool expect_in_place = o.flatten && !o.kernel_params_node;
  CHECK(in_place == (expect_in_place ? kSteps : 0), "%s: %d of %d steps in place", o.name, in_place, kSteps);
}

}  // namespace

int main() {
  Gpu device;
  gpu = &device;
  Announce("xla_flow traced");
  k = {gpu->Function("rcb_test_axpy_f32"), gpu->Function("rcb_test_add_f32"),
       gpu->Function("rcb_test_copy_u8")};
  // A capture costs 250 ms on the software GPU, as a captured collective does on MI300X.
  gpu->SetLatency("hipStreamEndCapture:250ms");
  Run({"flattened traced commands", true, false});
  Run({"traced commands as child graph nodes", false, false});
  Run({"flattened traced commands and a kernelParams kernel", true, true});
  gpu->SetLatency("");
  Run({"a collective whose key holds an allocation no node names, as child graph nodes", false, false, true});
  return Finish("xla_flow traced");
}
