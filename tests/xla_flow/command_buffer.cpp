// Replays, through include/rocm_cmdbuf.hpp, the call sequences of a patched XLA
// (xla-patches/0003 and 0004) on the software GPU or, with RCB_BACKEND=cuda, on an NVIDIA GPU:
//
//   * RocmCmdbufCommandBuffer: kernels with the argument kinds the bridge derives (device
//     addresses of KernelArgsPackedArray named by their slices (RCB_ARG_ALLOCATION), scalars,
//     RCB_ARG_SCAN for other packings,
//     kernelParams when sizes are unknown), memset with XLA's unbroadcast BitPattern, memcpy,
//     nested command buffers cloned as child nodes (control flow) and traced ones (stream
//     capture), finalize (PrepareFinalization / InstantiateGraph), launch;
//   * the bridge's NameAllocations (0004): KernelThunk gives each argument's buffer slice, and an
//     argument recorded as a device address at that slice's address becomes RCB_ARG_ALLOCATION;
//     replayed on aliased parameters (jit(f)(a, a), then (a, b), then (b, b)), named and not;
//   * CommandBufferThunk with 0004's hooks, in the order of the pinned commit: the warm-up
//     execution through thunks, the first recording at Initialize (SetAllocations, then the
//     commands), then at each execution UpdateBufferAllocations over the non-persistent
//     allocations commands use, MoveCommandBufferAllocations (deduplicated moves, none when a
//     command requires an update on every execution), and when that is refused or not tried the
//     recording: SetAllocations on the finalized buffer (kept pending by the bridge), BeginUpdate
//     then the pending table (CheckCanBeUpdated), RecordUpdate of the commands that use an
//     updated allocation or require an update, Finalize. Allocations are packed adjacently, as a
//     BFC allocator packs them, and arguments point inside them (interior slices).
//
// Every step's results are compared bit for bit with a command buffer recorded afresh at the
// new addresses, and outputs are overwritten with garbage before each launch so that a stale
// address cannot pass. Exits 0 when every check holds (Finish in check.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"

namespace {

constexpr uint64_t kN = 256;  // floats per allocation
constexpr uint64_t kBytes = kN * 4;
constexpr int kAllocs = 10;   // XLA's buffer allocations 0..9
// Allocations packed as a BFC allocator packs them: chunks of exactly one allocation's size, no
// gap between neighbours, so one allocation's end is the next one's base.
constexpr uint64_t kSlot = kBytes;
constexpr int kSlots = 64;

Gpu* gpu;

struct Kernels {
  void* fill;
  void* add;
  void* axpy;
  void* copy;
} k;

// A BFC-like allocator: every allocation lives in one chunk of an arena, 0..9 adjacent at first;
// a move takes a free chunk, often next to another allocation.
struct Arena {
  uint64_t base = 0;
  std::vector<int> slot_of;
  std::vector<bool> used;

  Arena() : slot_of(kAllocs), used(kSlots, false) {
    base = gpu->Malloc(kSlot * kSlots);
    for (int a = 0; a < kAllocs; ++a) {
      slot_of[a] = a;
      used[a] = true;
    }
  }
  ~Arena() { gpu->Free(base); }
  uint64_t Address(int a) const { return base + kSlot * slot_of[a]; }
  std::vector<rcb_allocation> Table() const {
    std::vector<rcb_allocation> table;
    for (int a = 0; a < kAllocs; ++a) table.push_back({Address(a), kBytes});
    return table;
  }
  void Move(int a, std::mt19937& rng) {
    int to;
    do to = static_cast<int>(rng() % kSlots);
    while (used[to]);
    used[slot_of[a]] = false;
    used[to] = true;
    slot_of[a] = to;
  }
};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Which commands the program holds beyond its kernels, memcpy and memset.
struct Shape {
  bool child = false;   // a nested command buffer (control flow) cloned as a child node
  bool traced = false;  // a traced command: a captured nested command buffer
  bool params = false;  // a kernel whose argument sizes XLA does not know (kernelParams)
  bool update_on_execute = false;  // the traced command requires an update on every execution
};

// The recorded state of one XLA command buffer: the primary, its nodes, its nested buffers.
struct Recorded {
  rcb::CmdBuf cb;
  std::vector<rcb_node> nodes;
  rcb::CmdBuf nested;
  rcb_node nested_fill = 0, nested_add = 0;
  rcb::CmdBuf traced;
};

// The bridge's NameAllocations (0004): an argument recorded as a device address whose address is
// where its slice (allocation, offset) lies in the table is named; the others stay addresses.
struct Slice {
  int64_t index, offset;
};

// `named` holds what the named arguments point to: one entry per argument, kept by the caller
// for as long as `args` is used.
void NameAllocations(const std::vector<Slice>& slices, const std::vector<rcb_allocation>& table,
                     std::vector<rcb_kernel_arg>& args, std::vector<rcb_arg_allocation>& named) {
  if (slices.size() != args.size()) return;
  named.assign(args.size(), rcb_arg_allocation{0, 0});
  for (size_t i = 0; i < args.size(); ++i) {
    const Slice& s = slices[i];
    if (args[i].kind != RCB_ARG_DEVICE_PTR || s.index < 0 || static_cast<size_t>(s.index) >= table.size() ||
        s.offset < 0) {
      continue;
    }
    uint64_t address = 0;
    std::memcpy(&address, args[i].value, 8);
    uint64_t offset = static_cast<uint64_t>(s.offset);
    if (offset > table[s.index].size || address != table[s.index].base + offset) continue;
    named[i] = rcb_arg_allocation{static_cast<uint64_t>(s.index), offset};
    args[i] = rcb_kernel_arg{&named[i], sizeof(rcb_arg_allocation), RCB_ARG_ALLOCATION};
  }
}

// Kernel launches as the bridge converts them.
rcb_kernel_launch Launch(void* f, const rcb_kernel_arg* args, size_t n) {
  return rcb_kernel_launch{f, {1, 1, 1}, {256, 1, 1}, 0, args, n};
}

// XLA's per-command recording: `update` is RecordUpdate (the node exists), else RecordCreate.
// Each command names the allocations it uses, for RecordUpdate's skip of unaffected commands.
class Program {
 public:
  explicit Program(Shape shape) : shape_(shape) {}

  // The allocations each command uses, in command order.
  std::vector<std::set<int>> Uses() const {
    std::vector<std::set<int>> uses = {{2}, {0, 1, 2}, {0, 2}, {2, 3}, {3, 4}, {1, 4, 5}};
    if (shape_.child) uses.push_back({5, 6, 7});
    if (shape_.traced) uses.push_back({0, 5, 8});
    if (shape_.params) uses.push_back({5, 9});
    return uses;
  }
  std::vector<int> Outputs() const {
    std::vector<int> out = {2, 3, 4, 5};
    if (shape_.child) out.insert(out.end(), {6, 7});
    if (shape_.traced) out.push_back(8);
    if (shape_.params) out.push_back(9);
    return out;
  }

  // A fresh record at the arena's addresses (the reference every execution is compared with):
  // a new primary command buffer, the table, every command, finalize.
  std::unique_ptr<Recorded> Create(const Arena& arena) const {
    auto r = std::make_unique<Recorded>();
    OK(rcb::CmdBuf::Create(0, &r->cb));
    OK(r->cb.SetAllocations(arena.Table()));
    RecordCreate(*r, arena);
    OK(r->cb.Finalize());  // InstantiateGraph
    return r;
  }

  // CommandExecutor::RecordCreate: every command, in a chain.
  void RecordCreate(Recorded& r, const Arena& arena) const {
    size_t commands = Uses().size();
    r.nodes.clear();
    for (size_t c = 0; c < commands; ++c) {
      std::vector<rcb_node> deps;
      if (c > 0) deps.push_back(r.nodes.back());
      r.nodes.push_back(0);
      Record(r, c, arena, deps, /*update=*/false);
    }
  }

  // CommandExecutor::RecordUpdate: a command is recorded again unless it does not require an
  // update on every execution and uses none of `updated` (sorted, possibly repeated).
  void RecordUpdate(Recorded& r, const Arena& arena, const std::vector<int>& updated) const {
    std::vector<std::set<int>> uses = Uses();
    for (size_t c = 0; c < uses.size(); ++c) {
      bool touched = std::any_of(updated.begin(), updated.end(), [&](int a) { return uses[c].count(a) > 0; });
      if (touched || RequiresUpdateOnExecute(c)) Record(r, c, arena, {}, /*update=*/true);
    }
  }

  // The traced command of a shape with update_on_execute requires an update on every execution
  // (as some collectives and custom calls do).
  bool RequiresUpdateOnExecute(size_t c) const { return AnyRequiresUpdateOnExecute() && c == TracedCommand(); }
  bool AnyRequiresUpdateOnExecute() const { return shape_.update_on_execute && shape_.traced; }
  size_t TracedCommand() const { return shape_.child ? 7 : 6; }

 private:
  void Record(Recorded& r, size_t c, const Arena& arena, const std::vector<rcb_node>& deps, bool update) const {
    auto at = [&](int a, uint64_t offset = 0) { return arena.Address(a) + offset; };
    rcb::CmdBuf& cb = r.cb;
    rcb_node& node = r.nodes[c];
    uint64_t n = kN, bytes = kBytes;
    if (c == 0) {  // memset of a u8 BitPattern: element size 1, pattern not broadcast
      if (update) OK(cb.UpdateMemset(node, at(2), 0, 1, kBytes));
      else OK(cb.AddMemset(deps, at(2), 0, 1, kBytes, &node));
    } else if (c == 1 || c == 2 || c == 5) {  // KernelArgsPackedArray: device addresses + scalars
      uint64_t out = c == 1 ? at(2) : c == 2 ? at(2, 512) : at(5);
      uint64_t x = c == 1 ? at(0) : c == 2 ? at(0, 256) : at(4);
      uint64_t y = c == 1 ? at(1) : at(1);
      float a = 2.0f;
      uint64_t half = kN / 2;
      std::vector<rcb_kernel_arg> args;
      void* f;
      if (c == 2) {  // axpy on interior slices of allocations 2 and 0
        f = k.axpy;
        args = {{&out, 8, RCB_ARG_DEVICE_PTR}, {&x, 8, RCB_ARG_DEVICE_PTR}, {&a, 4, RCB_ARG_VALUE},
                {&half, 8, RCB_ARG_VALUE}};
      } else {
        f = k.add;
        args = {{&out, 8, RCB_ARG_DEVICE_PTR}, {&x, 8, RCB_ARG_DEVICE_PTR}, {&y, 8, RCB_ARG_DEVICE_PTR},
                {&n, 8, RCB_ARG_VALUE}};
      }
      // KernelThunk::Record gives each argument's slice and the bridge names the pointers
      // (0004); the table is the one SetAllocations gave before this recording.
      std::vector<Slice> slices =
          c == 1   ? std::vector<Slice>{{2, 0}, {0, 0}, {1, 0}, {-1, 0}}
          : c == 2 ? std::vector<Slice>{{2, 512}, {0, 256}, {-1, 0}, {-1, 0}}
                   : std::vector<Slice>{{5, 0}, {4, 0}, {1, 0}, {-1, 0}};
      std::vector<rcb_arg_allocation> named;
      NameAllocations(slices, arena.Table(), args, named);
      rcb_kernel_launch launch = Launch(f, args.data(), args.size());
      if (update) OK(cb.UpdateKernel(node, launch));
      else OK(cb.AddKernel(deps, launch, &node));
    } else if (c == 3) {
      if (update) OK(cb.UpdateMemcpyD2D(node, at(3), at(2), kBytes));
      else OK(cb.AddMemcpyD2D(deps, at(3), at(2), kBytes, &node));
    } else if (c == 4) {  // another packing (sizes known, kinds not): every argument scanned
      uint64_t dst = at(4), src = at(3);
      rcb_kernel_arg args[] = {{&dst, 8, RCB_ARG_SCAN}, {&src, 8, RCB_ARG_SCAN}, {&bytes, 8, RCB_ARG_SCAN}};
      rcb_kernel_launch launch = Launch(k.copy, args, 3);
      if (update) OK(cb.UpdateKernel(node, launch));
      else OK(cb.AddKernel(deps, launch, &node));
    } else {
      size_t extra = c - 6;
      if (shape_.child && extra-- == 0) return Child(r, arena, deps, update);
      if (shape_.traced && extra-- == 0) return Traced(r, arena, deps, update);
      uint64_t out = at(9), x = at(5);
      void* params[] = {&out, &x, &x, &n};
      rcb_kernel_params_launch launch{k.add, {1, 1, 1}, {256, 1, 1}, 0, params};
      if (update) OK(cb.UpdateKernelParams(node, launch));
      else OK(cb.AddKernelParams(deps, launch, &node));
    }
  }

  // A control-flow command: its nested command buffer is recorded (or updated) and finalized,
  // then cloned into the primary (CreateChildCommand / UpdateChildCommand).
  void Child(Recorded& r, const Arena& arena, const std::vector<rcb_node>& deps, bool update) const {
    uint64_t a6 = arena.Address(6), a7 = arena.Address(7), a5 = arena.Address(5), n = kN;
    uint32_t half = Bits(0.5f);
    rcb_kernel_arg fill[] = {{&a6, 8, RCB_ARG_DEVICE_PTR}, {&half, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    rcb_kernel_arg add[] = {{&a7, 8, RCB_ARG_DEVICE_PTR}, {&a6, 8, RCB_ARG_DEVICE_PTR},
                            {&a5, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    if (!update) {
      OK(rcb::CmdBuf::CreateNested(0, &r.nested));
      OK(r.nested.AddKernel({}, Launch(k.fill, fill, 3), &r.nested_fill));
      OK(r.nested.AddKernel({r.nested_fill}, Launch(k.add, add, 4), &r.nested_add));
      OK(r.nested.Finalize());
      OK(r.cb.AddChild(deps, r.nested, &r.nodes[6]));
      return;
    }
    OK(r.nested.BeginUpdate());
    OK(r.nested.UpdateKernel(r.nested_fill, Launch(k.fill, fill, 3)));
    OK(r.nested.UpdateKernel(r.nested_add, Launch(k.add, add, 4)));
    OK(r.nested.Finalize());
    OK(r.cb.UpdateChild(r.nodes[6], r.nested));
  }

  // A traced command: TraceCommandBufferFactory captures a nested command buffer on the trace
  // stream (a miss of XLA's trace cache traces again at the new addresses).
  void Traced(Recorded& r, const Arena& arena, const std::vector<rcb_node>& deps, bool update) const {
    rcb::CmdBuf traced;
    OK(rcb::CmdBuf::CreateNested(0, &traced));
    OK(traced.CaptureBegin(gpu->stream()));
    uint64_t out = arena.Address(8), x = arena.Address(5), y = arena.Address(0), n = kN;
    void* params[] = {&out, &x, &y, &n};
    gpu->Launch(k.add, 1, 256, params);
    OK(traced.CaptureEnd());
    OK(traced.Finalize());
    size_t node = TracedCommand();
    if (update) OK(r.cb.UpdateChild(r.nodes[node], traced));
    else OK(r.cb.AddChild(deps, traced, &r.nodes[node]));
    r.traced = std::move(traced);
  }

  Shape shape_;
};

// One execution: inputs written, outputs overwritten with garbage, launch, outputs read.
std::vector<uint8_t> Execute(rcb::CmdBuf& cb, const Arena& arena, const Program& program, int step) {
  std::vector<float> x(kN), y(kN);
  for (uint64_t i = 0; i < kN; ++i) {
    x[i] = static_cast<float>((i * 7 + step) % 13) - 6.0f;
    y[i] = static_cast<float>((i * 5 + 3 * step) % 11) * 0.25f;
  }
  gpu->Write(arena.Address(0), x.data(), kBytes);
  gpu->Write(arena.Address(1), y.data(), kBytes);
  std::vector<uint8_t> garbage(kBytes, 0xAB);
  for (int a : program.Outputs()) gpu->Write(arena.Address(a), garbage.data(), kBytes);
  OK(cb.Launch(gpu->stream()));
  gpu->Sync();
  std::vector<uint8_t> out;
  for (int a : program.Outputs()) {
    std::vector<uint8_t> bytes(kBytes);
    gpu->Read(bytes.data(), arena.Address(a), kBytes);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  // A host check of allocation 5 (= x + y with the interior axpy, copied, + y).
  std::vector<float> a5(kN);
  std::memcpy(a5.data(), out.data() + 3 * kBytes, kBytes);
  for (uint64_t i = 0; i < kN; ++i) {
    float a2 = x[i] + y[i];
    if (i >= 128) a2 += 2.0f * x[i - 128 + 64];
    float want = a2 + y[i];
    if (std::fabs(a5[i] - want) > 1e-4f * (1.0f + std::fabs(want))) {
      CHECK_RESULT(false, "step %d: allocation 5 [%llu] = %g, want %g", step, (unsigned long long)i, a5[i], want);
      break;
    }
  }
  return out;
}

// RocmCmdbufCommandBuffer with --xla_gpu_rocm_cmdbuf_update_in_place (xla-patches/0004): the
// table last given by SetAllocations with the moves since; a finalized command buffer keeps a new
// table pending until its update begins (CheckCanBeUpdated: BeginUpdate, then the table).
struct Bridge {
  enum class State { kCreate, kUpdate, kFinalized };
  Recorded r;
  std::vector<rcb_allocation> table;
  bool pending = false;
  State state = State::kCreate;

  Bridge() { OK(rcb::CmdBuf::Create(0, &r.cb)); }
  void SetAllocations(const std::vector<rcb_allocation>& t) {
    table = t;
    pending = state == State::kFinalized;
    if (!pending) OK(r.cb.SetAllocations(table));
  }
  // Whether every move was patched in place; false sends the thunk down the recording path.
  bool MoveAllocations(const std::vector<rcb_allocation_move>& moves, rcb_update_report* report) {
    for (const rcb_allocation_move& m : moves) {
      if (m.index >= table.size()) return false;  // a new allocation: recorded again
    }
    OK(r.cb.MoveAllocations(moves, report));
    if (report->needs_rerecord) return false;
    for (const rcb_allocation_move& m : moves) table[m.index].base = m.base;
    return true;
  }
  void BeginUpdate() {
    OK(r.cb.BeginUpdate());
    state = State::kUpdate;
    if (pending) {
      pending = false;
      OK(r.cb.SetAllocations(table));
    }
  }
  void Finalize() {
    OK(r.cb.Finalize());
    state = State::kFinalized;
  }
};

struct Counts {
  int in_place = 0, recorded = 0, idle = 0, steps = 0, move_calls = 0;
};

// `steps` executions of one CommandBufferThunk while the allocator moves allocations in
// `movable` (the others are persistent), replayed as the patched XLA at the pinned commit makes
// them: the first execution is the warm-up through thunks (no command buffer); the next
// Initialize records it (SetAllocations, UpdateBufferAllocations, RecordCreate, Finalize); every
// ExecuteOnStream computes UpdateBufferAllocations over the non-persistent allocations commands
// use (an index repeated when the recorded table grows), then MoveCommandBufferAllocations (the
// indices sorted and deduplicated into moves unless a command requires an update on every
// execution; a refusal gives the table for the recording), then the recording when still
// needed (Update: BeginUpdate with the pending table; RecordUpdate of the commands that use an
// updated allocation or require an update; Finalize), then the launch. Each execution's
// results are compared bit for bit with a fresh record at the same addresses.
Counts Run(const char* name, Shape shape, std::set<int> movable, int steps, unsigned seed) {
  Program program(shape);
  Arena arena;
  std::mt19937 rng(seed);
  Bridge bridge;
  bool warmup_done = false;
  std::vector<uint64_t> recorded;  // ExecutorCommandBuffer::recorded_allocs (0: never set)
  std::set<int> used;
  for (const std::set<int>& u : program.Uses()) used.insert(u.begin(), u.end());
  std::vector<int> dynamic;  // the commands' allocations less the persistent ones, sorted
  for (int a : used) {
    if (movable.count(a) > 0) dynamic.push_back(a);
  }
  auto update_buffer_allocations = [&] {
    std::vector<int> updated;
    for (int a : dynamic) {
      if (recorded.size() <= static_cast<size_t>(a)) {
        recorded.resize(a + 1, 0);
        updated.push_back(a);
      }
      if (recorded[a] != arena.Address(a)) {
        recorded[a] = arena.Address(a);
        updated.push_back(a);
      }
    }
    return updated;
  };
  Counts counts;
  std::vector<int> pool(movable.begin(), movable.end());
  for (int step = 0; step < steps; ++step, ++counts.steps) {
    if (step > 1) {  // the allocator moves some allocations between executions (sometimes none)
      std::set<int> moved;
      size_t how_many = rng() % 4;
      while (moved.size() < how_many) moved.insert(pool[rng() % pool.size()]);
      for (int a : moved) arena.Move(a, rng);
    }
    // Initialize: nothing before the warm-up, then the first recording.
    if (warmup_done && bridge.state == Bridge::State::kCreate) {
      bridge.SetAllocations(arena.Table());
      update_buffer_allocations();
      program.RecordCreate(bridge.r, arena);
      bridge.Finalize();
    }
    std::vector<uint8_t> got;
    if (!warmup_done) {
      // The warm-up runs the thunks, not a command buffer: the same commands launched once (a
      // fresh record stands in for them here).
      std::unique_ptr<Recorded> thunks = program.Create(arena);
      got = Execute(thunks->cb, arena, program, step);
      warmup_done = true;
    } else {
      bool is_first_record = bridge.state == Bridge::State::kCreate;
      std::vector<int> updated = update_buffer_allocations();
      bool requires_update_on_execute = program.AnyRequiresUpdateOnExecute();
      bool needs_update = requires_update_on_execute || !updated.empty();
      // MoveCommandBufferAllocations (0004).
      bool moved_in_place = false;
      if (!is_first_record && needs_update && !requires_update_on_execute && !updated.empty() &&
          bridge.state == Bridge::State::kFinalized) {
        std::vector<int> indices = updated;
        indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
        std::vector<rcb_allocation_move> moves;
        for (int a : indices) moves.push_back({static_cast<uint64_t>(a), arena.Address(a)});
        rcb_update_report report{};
        ++counts.move_calls;
        moved_in_place = bridge.MoveAllocations(moves, &report);
        if (moved_in_place) {
          CHECK(report.patched_sites > 0 && report.updated_nodes > 0, "%s step %d: a move patched nothing", name,
                step);
        }
      }
      if (moved_in_place) {
        needs_update = false;
        ++counts.in_place;
      } else if (is_first_record || needs_update) {
        bridge.SetAllocations(arena.Table());
      }
      if (is_first_record || needs_update) {
        ++counts.recorded;
        if (bridge.state == Bridge::State::kFinalized) bridge.BeginUpdate();  // CommandExecutor::Record
        if (bridge.state == Bridge::State::kUpdate) {
          program.RecordUpdate(bridge.r, arena, updated);
        } else {
          program.RecordCreate(bridge.r, arena);
        }
        bridge.Finalize();
      } else if (!moved_in_place) {
        ++counts.idle;
      }
      got = Execute(bridge.r.cb, arena, program, step);
    }
    std::unique_ptr<Recorded> fresh = program.Create(arena);
    std::vector<uint8_t> expected = Execute(fresh->cb, arena, program, step);
    CHECK_RESULT(got == expected, "%s step %d: results differ from a fresh record at the same addresses", name, step);
  }
  std::printf("%s: %d executions (the first through thunks): %d moved in place, %d recorded again, %d with "
              "nothing moved\n",
              name, counts.steps, counts.in_place, counts.recorded, counts.idle);
  return counts;
}

// jit(f)(p0, p1) with out = p0 + p1 over three steps of parameters: (a, a), (a, b), (b, b), then
// (a, b) again. Allocations 0 and 1 are the parameters (aliased when one array is passed twice),
// 2 the output. Each step's moves go through MoveAllocations as the thunk sends them; a refusal
// goes through the thunk's re-record; every result is checked against a fresh record and the
// host's a + b. With `named` the bridge names each argument's allocation and nothing is refused;
// without it (a kernel whose packing function re-packs its arguments) the library sees only
// addresses: an address recorded while the parameters aliased is ambiguous, so a step that parts
// them must be refused; addresses recorded apart follow their own allocation from then on.
void AliasedParameters(bool named) {
  const char* name = named ? "aliased parameters, arguments named" : "aliased parameters, addresses only";
  uint64_t a = gpu->Malloc(kBytes), b = gpu->Malloc(kBytes), out = gpu->Malloc(kBytes);
  std::vector<float> va(kN), vb(kN);
  for (uint64_t i = 0; i < kN; ++i) {
    va[i] = static_cast<float>(i) + 1.0f;
    vb[i] = 100.0f + static_cast<float>(i);
  }
  gpu->Write(a, va.data(), kBytes);
  gpu->Write(b, vb.data(), kBytes);
  // Records or updates the one kernel against `table`, as KernelThunk::Record and the bridge do
  // (`names`: the bridge names the arguments; the fresh record the results are compared with
  // gives addresses only, so that it does not depend on how names are decoded).
  auto record = [&](rcb::CmdBuf& cb, rcb_node* node, const std::vector<rcb_allocation>& table, bool update,
                    bool names) {
    uint64_t o = table[2].base, x = table[0].base, y = table[1].base, n = kN;
    std::vector<rcb_kernel_arg> args = {{&o, 8, RCB_ARG_DEVICE_PTR}, {&x, 8, RCB_ARG_DEVICE_PTR},
                                        {&y, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    std::vector<rcb_arg_allocation> named_args;
    if (names) NameAllocations({{2, 0}, {0, 0}, {1, 0}, {-1, 0}}, table, args, named_args);
    rcb_kernel_launch launch = Launch(k.add, args.data(), args.size());
    if (update) OK(cb.UpdateKernel(*node, launch));
    else OK(cb.AddKernel({}, launch, node));
  };
  auto run = [&](rcb::CmdBuf& cb) {
    std::vector<uint8_t> garbage(kBytes, 0xAB), result(kBytes);
    gpu->Write(out, garbage.data(), kBytes);
    OK(cb.Launch(gpu->stream()));
    gpu->Sync();
    gpu->Read(result.data(), out, kBytes);
    return result;
  };
  std::vector<rcb_allocation> table = {{a, kBytes}, {a, kBytes}, {out, kBytes}};
  rcb::CmdBuf cb;
  rcb_node node = 0;
  OK(rcb::CmdBuf::Create(0, &cb));
  OK(cb.SetAllocations(table));
  record(cb, &node, table, false, named);
  OK(cb.Finalize());
  int refused = 0;
  bool recorded_aliased = true;
  const uint64_t steps[][2] = {{a, b}, {b, b}, {a, b}, {a, a}};
  for (size_t step = 0; step < 4; ++step) {
    std::vector<rcb_allocation_move> moves;
    for (int p = 0; p < 2; ++p) {
      if (table[p].base != steps[step][p]) moves.push_back({static_cast<uint64_t>(p), steps[step][p]});
    }
    for (const rcb_allocation_move& m : moves) table[m.index].base = m.base;
    rcb_update_report report{};
    OK(cb.MoveAllocations(moves, &report));
    bool must_refuse = !named && recorded_aliased && table[0].base != table[1].base;
    if (named) CHECK(report.needs_rerecord == 0, "%s step %zu: refused although every argument is named", name, step);
    if (must_refuse) CHECK(report.needs_rerecord == 1, "%s step %zu: an ambiguous address was moved", name, step);
    if (report.needs_rerecord) {
      ++refused;
      OK(cb.BeginUpdate());
      OK(cb.SetAllocations(table));
      record(cb, &node, table, true, named);
      OK(cb.Finalize());
      recorded_aliased = table[0].base == table[1].base;
    }
    std::vector<uint8_t> patched = run(cb);
    rcb::CmdBuf fresh;
    rcb_node fresh_node = 0;
    OK(rcb::CmdBuf::Create(0, &fresh));
    OK(fresh.SetAllocations(table));
    record(fresh, &fresh_node, table, false, false);
    OK(fresh.Finalize());
    CHECK_RESULT(patched == run(fresh), "%s step %zu: results differ from a fresh record", name, step);
    std::vector<float> got(kN);
    std::memcpy(got.data(), patched.data(), kBytes);
    const std::vector<float>& x = steps[step][0] == a ? va : vb;
    const std::vector<float>& y = steps[step][1] == a ? va : vb;
    for (uint64_t i = 0; i < kN; ++i) {
      if (got[i] != x[i] + y[i]) {
        CHECK_RESULT(false, "%s step %zu: out[%llu] = %g, want %g", name, step, (unsigned long long)i, got[i], x[i] + y[i]);
        break;
      }
    }
  }
  std::printf("%s: 4 steps, %d recorded again\n", name, refused);
  gpu->Free(a);
  gpu->Free(b);
  gpu->Free(out);
}

}  // namespace

int main() {
  Gpu device;
  gpu = &device;
  Announce("xla_flow");
  k = {device.Function("rcb_test_fill_u32"), device.Function("rcb_test_add_f32"),
       device.Function("rcb_test_axpy_f32"), device.Function("rcb_test_copy_u8")};

  // Kernels, memcpy and memset only: a kernels-only program is never recorded again for a move.
  Counts plain = Run("kernels, memcpy, memset", {}, {0, 1, 2, 3, 4, 5}, 40, 1);
  CHECK(plain.recorded == 0 && plain.in_place > 0, "every move in place (%d recorded again)", plain.recorded);

  // A nested command buffer as a child node: moves that only kernels see stay in place, and a
  // move the library refuses goes down XLA's recording path (UpdateChild).
  Shape child;
  child.child = true;
  Counts with_child = Run("with a child command buffer", child, {0, 1, 2, 3, 4, 5, 6, 7}, 40, 2);
  CHECK(with_child.in_place > 0 && with_child.recorded > 0, "both paths taken");

  // One array passed for two parameters, then two arrays, then the other one twice.
  AliasedParameters(true);
  AliasedParameters(false);

  // A traced command and a kernel with unknown argument sizes.
  Shape opaque;
  opaque.traced = true;
  opaque.params = true;
  Run("with a traced command and a kernelParams kernel", opaque, {0, 1, 2, 3, 4, 5, 8, 9}, 12, 3);

  // A command that requires an update on every execution: XLA never moves in place, and
  // records that command (and those that use a moved allocation) again at every execution.
  Shape always;
  always.traced = true;
  always.update_on_execute = true;
  Counts every = Run("with a command updated at every execution", always, {0, 1, 2, 3, 4, 5, 8}, 12, 4);
  CHECK(every.move_calls == 0 && every.recorded == every.steps - 1, "MoveAllocations called %d times, %d of %d executions recorded",
        every.move_calls, every.recorded, every.steps - 1);

  if (device.cuda()) {
    Skipped("a step with nothing moved makes no setter call; a failing exec setter falls back to recording",
            "the software GPU's call counters and fault injection");
  } else {
    // A step in which nothing moved costs no runtime call; a failing exec setter sends the thunk
    // down the recording path, and the results are still right.
    Program program({});
    Arena arena;
    std::unique_ptr<Recorded> r = program.Create(arena);
    const char* setters[] = {"hipGraphExecKernelNodeSetParams", "hipGraphExecMemcpyNodeSetParams1D",
                             "hipGraphExecMemsetNodeSetParams", "hipGraphKernelNodeSetParams"};
    uint64_t before = 0, after = 0;
    for (const char* s : setters) before += device.CallCount(s);
    rcb_update_report report{};
    OK(r->cb.MoveAllocations({}, &report));
    rcb_allocation_move same = {0, arena.Address(0)};
    OK(r->cb.MoveAllocations({&same, 1}, &report));
    for (const char* s : setters) after += device.CallCount(s);
    CHECK(after == before && report.moved_allocations == 0, "a step with nothing moved made %llu setter calls",
          (unsigned long long)(after - before));

    std::mt19937 rng(4);
    arena.Move(0, rng);
    CHECK(device.SetFaults("hipGraphExecKernelNodeSetParams:1"), "fault injection");
    rcb_allocation_move moved = {0, arena.Address(0)};
    OK(r->cb.MoveAllocations({&moved, 1}, &report));
    CHECK(report.needs_rerecord == 1, "a failing exec setter asks for a re-record");
    CHECK_CONTRACT(!r->cb.Launch(device.stream()).ok(), "launch refused while nodes are stale");
    device.SetFaults("");
    OK(r->cb.BeginUpdate());  // the bridge's CheckCanBeUpdated: BeginUpdate, then the pending table
    OK(r->cb.SetAllocations(arena.Table()));
    program.RecordUpdate(*r, arena, {0});
    OK(r->cb.Finalize());
    std::vector<uint8_t> patched = Execute(r->cb, arena, program, 99);
    std::unique_ptr<Recorded> fresh = program.Create(arena);
    CHECK_RESULT(patched == Execute(fresh->cb, arena, program, 99), "results after the fallback");
    std::printf("fault injection: the failed exec setter fell back to recording; results match\n");
  }

  return Finish("xla_flow");
}
