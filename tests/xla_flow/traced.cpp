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
// Two traced commands, a GEMM-like one (copy, axpy) and a cuDNN-like one (copy, axpy, on
// other buffers), sit between two kernels. Each of 20 steps moves allocations, writes new inputs
// and garbage outputs, then checks the outputs exactly. The software GPU makes each end of a
// capture cost 250 ms (HIPSIM_LATENCY), and the flow asserts at most one capture per traced
// command: from the library's process counters (rcb_counters_get), from the trace functions' own
// call counts and, on the software GPU, from its count of hipStreamEndCapture. A cuDNN graph
// whose key names an allocation no node holds (a workspace it reads addresses from) is captured
// again for every new address set, and its results still checked.
//
// Only XLA's own traced commands (GEMM, cuBLASLt, cuDNN, convolution: UsesPlatformTraceCache in
// 0005) go through the trace cache. A custom call keeps XLA's TracedCommandBuffer, as a
// collective kernel does: an FFI handler may keep buffer addresses in device memory, which a
// relocation would leave stale. It is recorded as the forked trace below: traced again for new
// addresses into a nested command buffer, one child node, never flattened, every move of what it
// uses refused.
//
// A command buffer whose commands hold a collective is XLA's own from the start (0005:
// CommandBufferThunk creates it with rocm_cmdbuf off for the thread), so the library records
// none: fallbacks.cpp replays it with the HIP graph API alone. What the library still records is
// a traced command that XLA's TracedCommandBuffer traces (a custom call, whose FFI handler may
// issue RCCL calls of its own, which CommandsHoldCollectives cannot see), in a module without
// --xla_gpu_rocm_cmdbuf_flatten_traced: traced (here on every record) into a new nested command
// buffer (TraceCommandBufferFactory: Trace, Finalize), which CreateClonedChildNode /
// UpdateClonedChildNode add or update as one child node (AddChild / UpdateChild); the GEMM-like
// command goes through the trace cache into a child graph node. The custom call's trace forks
// onto a stream of its own and joins back as NCCL does (event record and wait, an event wait node
// and an event record node on NCCL's serial event), so its graph holds event nodes and the edges
// the fork and join make. Every step is exact (including those that move the traced command's
// buffers), the library refuses every move (the child node's graph came from a capture), nothing
// is flattened or re-instantiated, and each record traces the command again and updates its child
// node in the executable graph.
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

// cuDNN-like: a3 = a2; a3 += 0.5 * a2.
void IssueCudnn(const Buffers& b) {
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
  // The cuDNN graph's key holds an allocation none of its nodes names (a table of buffer
  // addresses in device memory): the library must capture it again
  // for new addresses rather than relocate it.
  bool hidden_allocation = false;
};

// The command buffer thunk over: add(a1 = a0 + a0) → gemm → cudnn → add(a4 = a3 + a0)
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
  int CudnnTraces() const { return coll_.traces; }

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
  Traced coll_{"cudnn", {2, 3}, IssueCudnn};
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
  int traces = flow.GemmTraces() + flow.CudnnTraces();
  std::printf("%s: %d steps, %d moved in place, %d recorded again; %d trace(s); counters: %llu captures, "
              "%llu relocations, %llu hits",
              o.name, kSteps, in_place, kSteps - in_place, traces, static_cast<unsigned long long>(counted),
              static_cast<unsigned long long>(relocations), static_cast<unsigned long long>(hits));
  if (!gpu->cuda()) std::printf(", %llu hipStreamEndCapture", static_cast<unsigned long long>(captures));
  std::printf("\n");
  if (gpu->cuda()) Skipped("the number of captures", "the software GPU's call counters");
  // Allocation 3, which the cuDNN graph uses, moves at every step.
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

// The forked trace (a custom call issuing RCCL): a3 = a2 on the user's stream, then, as NCCL
// issues a collective into a capture (ncclStrongStreamAcquire / Release, v2.28.9 strongstream.cc),
// its own stream brought into the capture with no dependencies, an event wait node on its serial
// event (what cudaStreamWaitEvent(..., cudaEventWaitExternal) adds), a wait for the user's stream,
// the collective's kernel (a3 += 0.5 * a2), an event record node on the serial event after it
// (cudaGraphAddEventRecordNode on the capture's graph, made the stream's dependency), and the
// user's stream waiting for NCCL's (the join). Events recorded on a capturing stream make edges,
// not nodes, on both runtimes: the graph holds two kernels, the two event nodes and their edges.
struct Collective {
  void* side;    // NCCL's stream
  void* serial;  // NCCL's serial event, recorded outside captures as eager collectives do
  void* fork;
  void* user;
  void* join;
  int traces = 0;
};

void IssueForkedCollective(Collective& c, const Buffers& b, void* stream) {
  ++c.traces;
  CopyArgs copy{b.addr[3], b.addr[2], kBytes};
  gpu->LaunchPacked(k.copy, 1, 256, &copy, sizeof copy, stream);
  gpu->RecordEvent(c.fork, stream);
  gpu->WaitEvent(c.side, c.fork);
  gpu->SetCaptureDependencies(c.side, {});
  Gpu::CaptureInfo info = gpu->Capturing(c.side);
  void* wait = gpu->AddEventNode(false, info.graph, info.last, c.serial);
  gpu->SetCaptureDependencies(c.side, {wait});
  gpu->RecordEvent(c.user, stream);
  gpu->WaitEvent(c.side, c.user);
  AxpyArgs axpy{b.addr[3], b.addr[2], 0.5f, 0, kN};
  gpu->LaunchPacked(k.axpy, 1, 256, &axpy, sizeof axpy, c.side);
  info = gpu->Capturing(c.side);
  void* record = gpu->AddEventNode(true, info.graph, info.last, c.serial);
  gpu->SetCaptureDependencies(c.side, {record});
  gpu->RecordEvent(c.join, c.side);
  gpu->WaitEvent(stream, c.join);
}

// Whether `graph` is the collective's capture: two kernels, an event wait and an event record
// node, the collective's kernel after the copy and the wait node, the record node after it.
bool IsForkedCollective(void* graph) {
  std::vector<void*> nodes = gpu->GraphNodes(graph);
  int kernels = 0;
  void *wait = nullptr, *record = nullptr;
  for (void* n : nodes) {
    int type = gpu->NodeType(n);
    kernels += type == Gpu::kKernelNode ? 1 : 0;
    if (type == Gpu::kWaitEventNode) wait = n;
    if (type == Gpu::kEventRecordNode) record = n;
  }
  if (nodes.size() != 4 || kernels != 2 || wait == nullptr || record == nullptr) return false;
  std::vector<void*> after = gpu->Dependencies(record);
  if (after.size() != 1 || gpu->NodeType(after[0]) != Gpu::kKernelNode) return false;
  std::vector<void*> before = gpu->Dependencies(after[0]);
  if (before.size() != 2 || !gpu->Dependencies(wait).empty()) return false;
  void* copy = before[0] == wait ? before[1] : before[0];
  return (before[0] == wait || before[1] == wait) && gpu->NodeType(copy) == Gpu::kKernelNode &&
         gpu->Dependencies(copy).empty();
}

// The command buffer thunk over add(a1 = a0 + a0) → gemm → forked trace → add(a4 = a3 + a0), in
// a module without --xla_gpu_rocm_cmdbuf_flatten_traced: no traced command is flattened into it.
class ForkedTraceFlow {
 public:
  explicit ForkedTraceFlow(Buffers& b) : b_(b) {
    OK(rcb::TraceCache::Create(kTraceCacheSize, &gemm_cache_));
    gemm_.buffers = &b_;
    coll_.side = gpu->NewStream();
    coll_.serial = gpu->NewEvent();
    coll_.fork = gpu->NewEvent();
    coll_.user = gpu->NewEvent();
    coll_.join = gpu->NewEvent();
    gpu->RecordEvent(coll_.serial, gpu->stream());
    OK(rcb::CmdBuf::Create(0, &cb_));
    OK(cb_.SetAllocations(b_.Table()));
    Record(false);
    OK(cb_.Finalize());
  }

  // One execution (CommandBufferThunk::ExecuteOnStream): nothing moved, nothing to update; else
  // the thunk's move, refused here, then the RecordUpdate path. Returns the move's report.
  rcb_update_report Execute(const std::vector<rcb_allocation_move>& moves) {
    rcb_update_report report{};
    if (!moves.empty()) {
      OK(cb_.MoveAllocations(moves, &report));
      if (report.needs_rerecord != 0) {
        OK(cb_.BeginUpdate());
        OK(cb_.SetAllocations(b_.Table()));
        Record(true);
        OK(cb_.Finalize());
      }
    }
    OK(cb_.Launch(gpu->stream()));
    return report;
  }

  rcb::CmdBuf& cb() { return cb_; }
  rcb_node collective() const { return coll_node_; }
  int CollectiveTraces() const { return coll_.traces; }
  int GemmTraces() const { return gemm_.traces; }

 private:
  void Record(bool update) {
    uint64_t n = kN;
    uint64_t a0 = b_.addr[0], a1 = b_.addr[1], a3 = b_.addr[3], a4 = b_.addr[4];
    rcb_kernel_arg add1[] = {{&a1, 8, RCB_ARG_DEVICE_PTR}, {&a0, 8, RCB_ARG_DEVICE_PTR},
                             {&a0, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    rcb_kernel_arg add4[] = {{&a4, 8, RCB_ARG_DEVICE_PTR}, {&a3, 8, RCB_ARG_DEVICE_PTR},
                             {&a0, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    if (update) {
      OK(cb_.UpdateKernel(k1_, Launch(k.add, add1, 4)));
    } else {
      OK(cb_.AddKernel({}, Launch(k.add, add1, 4), &k1_));
    }
    // The GEMM: PlatformTraceCache::GetOrTrace, then CreateClonedChildNode / UpdateClonedChildNode,
    // which never flatten without --xla_gpu_rocm_cmdbuf_flatten_traced.
    std::vector<rcb_allocation> key;
    for (int i : gemm_.uses) key.push_back({b_.addr[i], kBytes});
    void* graph = nullptr;
    uint32_t outcome = 0;
    OK(gemm_cache_.GetOrTrace(gpu->stream(), key, TraceFn, &gemm_, &graph, &outcome));
    if (update) {
      OK(cb_.UpdateChildGraph(gemm_node_, graph));
    } else {
      OK(cb_.AddChildGraph({&k1_, 1}, graph, &gemm_node_));
    }
    // The forked trace: TracedCommandBuffer traces it (here on every record, as for addresses it
    // has not kept) into a new nested command buffer (TraceCommandBufferFactory::Create: Trace,
    // which is CaptureBegin, the trace and CaptureEnd; then Finalize), dropped once recorded.
    {
      rcb::CmdBuf nested;
      OK(rcb::CmdBuf::CreateNested(0, &nested));
      OK(nested.CaptureBegin(gpu->stream()));
      IssueForkedCollective(coll_, b_, gpu->stream());
      OK(nested.CaptureEnd());
      OK(nested.Finalize());
      if (update) {
        OK(cb_.UpdateChild(coll_node_, nested));
      } else {
        OK(cb_.AddChild({&gemm_node_, 1}, nested, &coll_node_));
      }
    }
    if (update) {
      OK(cb_.UpdateKernel(k2_, Launch(k.add, add4, 4)));
    } else {
      OK(cb_.AddKernel({&coll_node_, 1}, Launch(k.add, add4, 4), &k2_));
    }
  }

  Buffers& b_;
  rcb::CmdBuf cb_;
  rcb::TraceCache gemm_cache_;
  Traced gemm_{"gemm", {0, 1, 2}, IssueGemm};
  Collective coll_{};
  rcb_node k1_ = 0, gemm_node_ = 0, coll_node_ = 0, k2_ = 0;
};

rcb_counters CmdBufCounters(rcb::CmdBuf& cb) {
  rcb_counters c{};
  c.struct_size = sizeof c;
  OK(rcb::CountersGet(cb.get(), &c));
  return c;
}

void RunForkedTrace() {
  const char* name = "a traced command whose graph holds event nodes, as a child node";
  Buffers b;
  std::mt19937 rng(11);
  uint64_t captures_before = gpu->CallCount("hipStreamEndCapture");
  uint64_t child_sets_before = gpu->CallCount("hipGraphExecChildGraphNodeSetParams");
  ForkedTraceFlow flow(b);
  // The template: add, the GEMM's child node, the collective's child node, add; the collective's
  // child graph is its capture, event nodes and edges included.
  void* graph = nullptr;
  OK(flow.cb().Graph(&graph));
  std::vector<void*> top = gpu->GraphNodes(graph);
  int children = 0;
  bool forked = false;
  for (void* n : top) {
    if (gpu->NodeType(n) != Gpu::kChildNode) continue;
    ++children;
    forked |= IsForkedCollective(gpu->ChildGraph(n));
  }
  CHECK(top.size() == 4 && children == 2 && forked,
        "%s: the template holds %zu nodes, %d child nodes, the collective's capture %s", name, top.size(), children,
        forked ? "found" : "not found");
  // Steps of four kinds: the collective's buffers move (its output, or its input with the last
  // add's output), nothing moves, or only the first add's input does.
  const std::vector<std::vector<int>> kinds = {{3}, {}, {0}, {2, 4}};
  int moving = 0;
  const std::vector<float> poison(kN, -777.0f);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<rcb_allocation_move> moves;
    for (int i : kinds[static_cast<size_t>(step) % kinds.size()]) {
      // The old buffer keeps whatever a stale node would read or write there: poison.
      gpu->Write(b.addr[static_cast<size_t>(i)], poison.data(), kBytes);
      b.retired.push_back(b.addr[static_cast<size_t>(i)]);
      b.addr[static_cast<size_t>(i)] = gpu->Malloc(kBytes);
      moves.push_back({static_cast<uint64_t>(i), b.addr[static_cast<size_t>(i)]});
    }
    moving += moves.empty() ? 0 : 1;
    std::vector<float> input(kN), garbage(kN, -12345.0f);
    for (float& x : input) x = static_cast<float>(rng() % 1000);
    gpu->Write(b.addr[0], input.data(), kBytes);
    for (int i = 1; i < kAllocs; ++i) gpu->Write(b.addr[static_cast<size_t>(i)], garbage.data(), kBytes);
    const int traces = flow.CollectiveTraces();
    rcb_update_report report = flow.Execute(moves);
    gpu->Sync();
    std::vector<float> a2 = Read(b.addr[2]), a3 = Read(b.addr[3]), a4 = Read(b.addr[4]);
    bool exact = true;
    for (uint64_t j = 0; j < kN; ++j) {
      exact &= a2[j] == 5.0f * input[j] && a3[j] == 7.5f * input[j] && a4[j] == 8.5f * input[j];
    }
    CHECK_RESULT(exact, "%s: step %d: outputs differ from the inputs' expected multiples", name, step);
    // Every move refused whole, the collective traced again for it, never for a step without one.
    CHECK(moves.empty() || (report.needs_rerecord == 1 && report.patched_sites == 0),
          "%s: step %d: a move in place (%llu sites patched)", name, step,
          static_cast<unsigned long long>(report.patched_sites));
    CHECK(flow.CollectiveTraces() == traces + (moves.empty() ? 0 : 1), "%s: step %d: %d traces of the forked trace",
          name, step, flow.CollectiveTraces() - traces);
    // Nothing flattened into it: its nodes are still the four recorded, and its sites the two
    // adds' pointers.
    size_t nodes = 0, sites = 0;
    OK(flow.cb().NodeCount(&nodes));
    OK(flow.cb().SiteCount(&sites));
    CHECK(nodes == 4 && sites == 6, "%s: step %d: %zu nodes, %zu sites", name, step, nodes, sites);
  }
  rcb_counters c = CmdBufCounters(flow.cb());
  uint64_t child_sets = gpu->CallCount("hipGraphExecChildGraphNodeSetParams") - child_sets_before;
  uint64_t captures = gpu->CallCount("hipStreamEndCapture") - captures_before;
  std::printf("%s: %d steps exact, %d with moves, each refused and recorded again; the forked trace traced %d "
              "times, the GEMM %d; %llu instantiation(s), %llu refusal(s) for references",
              name, kSteps, moving, flow.CollectiveTraces(), flow.GemmTraces(),
              static_cast<unsigned long long>(c.instantiations),
              static_cast<unsigned long long>(c.fallbacks[RCB_FALLBACK_OPAQUE_REFERENCE]));
  if (!gpu->cuda()) {
    std::printf(", %llu child-graph sets, %llu hipStreamEndCapture", static_cast<unsigned long long>(child_sets),
                static_cast<unsigned long long>(captures));
  }
  std::printf("\n");
  CHECK(flow.CollectiveTraces() == 1 + moving && flow.GemmTraces() == 1, "%s: %d forked traces, %d GEMM traces",
        name, flow.CollectiveTraces(), flow.GemmTraces());
  // Updated in place in the executable graph: one instantiation, no address update.
  CHECK(c.instantiations == 1 && c.reinstantiations == 0 && c.address_updates == 0,
        "%s: %llu instantiations, %llu re-instantiations, %llu address updates", name,
        static_cast<unsigned long long>(c.instantiations), static_cast<unsigned long long>(c.reinstantiations),
        static_cast<unsigned long long>(c.address_updates));
  CHECK(c.fallbacks[RCB_FALLBACK_OPAQUE_REFERENCE] == static_cast<uint64_t>(moving),
        "%s: %llu moves refused for references, %d steps moved", name,
        static_cast<unsigned long long>(c.fallbacks[RCB_FALLBACK_OPAQUE_REFERENCE]), moving);
  if (gpu->cuda()) {
    Skipped("the child-graph sets and captures of a traced command whose graph holds event nodes",
            "the software GPU's call counters");
  } else {
    // Each record gives both child nodes their new graph in the executable graph; every trace is
    // one capture (the GEMM's first, the collective's each time).
    CHECK(child_sets == 2 * static_cast<uint64_t>(moving), "%s: %llu child-graph sets", name,
          static_cast<unsigned long long>(child_sets));
    CHECK(captures == static_cast<uint64_t>(1 + flow.CollectiveTraces()), "%s: %llu captures", name,
          static_cast<unsigned long long>(captures));
  }
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
  Run({"a cuDNN graph whose key holds an allocation no node names, as child graph nodes", false, false, true});
  RunForkedTrace();
  return Finish("xla_flow traced");
}
