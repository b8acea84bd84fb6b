// Replays, through include/rocm_cmdbuf.hpp, the call sequences of a patched XLA
// (xla-patches/0003 and 0004) on the software GPU or, with RCB_BACKEND=cuda, on an NVIDIA GPU:
//
//   * RocmCmdbufCommandBuffer: kernels with the argument kinds the bridge derives (device
//     addresses of KernelArgsPackedArray named by their slices (RCB_ARG_ALLOCATION), scalars,
//     RCB_ARG_SCAN for other packings, kernelParams when sizes are unknown), memset with XLA's
//     unbroadcast BitPattern and 32-bit values, memcpy, nested command buffers cloned as child
//     nodes (control flow) and traced ones (stream capture), finalize (PrepareFinalization /
//     InstantiateGraph), launch;
//   * CommandBufferThunk with 0004's hooks, in the order of the pinned commit (183fa00): at
//     every execution Initialize then ExecuteOnStream. Initialize does nothing before the warm-up
//     (when the commands require one), then records the first time (UpdateBufferAllocations;
//     SetAllocations, the hook of 0004, between it and the recording; RecordCreate; Finalize)
//     and again at every execution when a command requires an update on initialize and not
//     every allocation is persistent (UpdateBufferAllocations; SetAllocations, kept pending by
//     the finalized buffer; Update = BeginUpdate then the pending table (CheckCanBeUpdated);
//     RecordUpdate; Finalize). ExecuteOnStream runs the thunks at the warm-up, else computes
//     UpdateBufferAllocations over the non-persistent allocations commands use (an index
//     repeated when the recorded table grows) and whether it needs an update, then
//     MoveCommandBufferAllocations, the hook of 0004 between that and the recording
//     (deduplicated moves; none on the first recording or when a command requires an update on
//     every execution; where nothing was moved in place and it records, SetAllocations for the
//     recording), records when still needed and submits. RecordUpdate skips a command as
//     CommandExecutor does: unless it requires an update on every execution, or on initialize
//     while initializing, it is skipped when it uses none of the updated allocations, and
//     always when every allocation it uses is persistent;
//   * KernelThunk's ScopedLaunchArgumentSlices and the bridge's NameAllocations (0004): each
//     argument of a KernelArgsPackedArray is named by its slice against the table the command
//     buffer was last given, including a slice of size 0 one past its allocation's end;
//   * the executable's buffer allocations as XLA's BufferAllocations gives them: parameters
//     (one array may be passed for two of them, so that two allocations alias, and later part),
//     outputs, a temp allocation seen through overlapping slices, a constant (persistent: never
//     moved, never sent as a move) and a thread-local allocation without memory (null, size 0),
//     packed without gaps in one arena as a BFC allocator packs them: one allocation's end is
//     often the next one's base, and the allocations of one execution can take each other's
//     chunks at the next. An address a kernel of another packing gets without a name may then
//     come from two allocations (one's end, the next one's base; or two aliased parameters):
//     every move is checked against the header's rule, refused where it parts them, else (for
//     programs of kernels, memcpys and memsets only) done in place.
//
//   * the move log of 0004 (rocm_cmdbuf_move_log.cc, compiled as the patch has it): each execution
//     counted where the patched command buffer counts it (MoveAllocations, with its refusals by
//     the reason the command buffer's fallback counters gained, or CountUnmovedExecution), and
//     its counts and VLOG(1) summaries checked against this replay's own.
//
// Every execution's arena is compared bit for bit with the same execution of a command buffer
// recorded afresh at the same addresses (addresses only, no names) and with the result computed
// on the host from the allocations' contents: before each launch every output holds garbage and
// every other byte of the arena that no command may write (free chunks, among them the old
// buffers of moved allocations, and allocations no command writes) holds a guard pattern, so
// that a stale address, a write to an old buffer or a pointer that followed the wrong
// allocation cannot pass. Exits 0 when every check holds (Finish in check.h).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"

// 0004's move log, as the patch has it (patched.sh), counted as its command buffer counts.
#define ROCM_CMDBUF_AVAILABLE 1
#include "xla/stream_executor/rocm/rocm_cmdbuf_move_log.cc"

using MoveLog = stream_executor::gpu::RocmCmdbufMoveLog;

namespace {

constexpr uint64_t kN = 256;  // floats per allocation
constexpr uint64_t kBytes = kN * 4;
// The arena's chunks: exactly one allocation's size, no gap between neighbours.
constexpr uint64_t kChunk = kBytes;
constexpr int kChunks = 64;

// XLA's buffer allocations of the replayed executable, by index.
constexpr int kP0 = 0, kP1 = 1;  // parameters: x and y (one array may be passed for both)
constexpr int kO2 = 2, kO3 = 3, kO4 = 4, kO5 = 5;  // outputs
constexpr int kO6 = 6, kO7 = 7;  // the child command buffer's outputs
constexpr int kO8 = 8;           // the traced command's output
constexpr int kO9 = 9;           // the kernelParams kernel's output
constexpr int kConst = 10;       // a constant allocation: persistent
constexpr int kTemp = 11;        // the temp allocation, seen through overlapping slices
constexpr int kO12 = 12;         // an output computed from the temp allocation
constexpr int kDist = 13;        // the distances the range kernels write (u64 each)
constexpr int kLocal = 14;       // a thread-local allocation: BufferAllocations gives it no memory
constexpr int kAllocs = 15;

// Bytes before a launch: garbage in every output, a guard pattern where nothing may be written.
constexpr uint8_t kGarbage = 0xAB, kGuard = 0xCD;

Gpu* gpu;

struct Kernels {
  void* fill;
  void* add;
  void* axpy;
  void* copy;
  void* distance;
} k;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A BFC-like allocator: every allocation with memory lives in one chunk of an arena, all of them
// adjacent at first. Two parameters passed the same array share its chunk.
class Arena {
 public:
  Arena() : chunk_of_(kAllocs, -1) {
    base_ = gpu->Malloc(kChunk * kChunks);
    int next = 0;
    for (int a = 0; a < kAllocs; ++a) {
      if (a != kLocal) chunk_of_[a] = next++;
    }
  }
  ~Arena() { gpu->Free(base_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint64_t base() const { return base_; }
  uint64_t Address(int a) const { return chunk_of_[a] < 0 ? 0 : base_ + kChunk * chunk_of_[a]; }
  uint64_t Size(int a) const { return chunk_of_[a] < 0 ? 0 : kBytes; }
  // BufferAllocations::GetDeviceAddress of every allocation.
  std::vector<rcb_allocation> Table() const {
    std::vector<rcb_allocation> table;
    for (int a = 0; a < kAllocs; ++a) table.push_back({Address(a), Size(a)});
    return table;
  }
  bool ParametersAliased() const { return chunk_of_[kP0] == chunk_of_[kP1]; }
  // The allocations in chunk `c` (none: a free chunk).
  std::vector<int> Owners(int c) const {
    std::vector<int> owners;
    for (int a = 0; a < kAllocs; ++a) {
      if (chunk_of_[a] == c) owners.push_back(a);
    }
    return owners;
  }
  // The chunk at `address`, or -1 outside the arena.
  int ChunkAt(uint64_t address) const {
    if (address < base_ || address >= base_ + kChunk * kChunks) return -1;
    return static_cast<int>((address - base_) / kChunk);
  }

  // The next execution's buffers for `moved`: the last execution's are freed first (so that
  // two allocations can trade places), then each takes the lowest free chunk, as a best-fit
  // allocator does, or (half the time, at random) any free chunk.
  void Reallocate(const std::set<int>& moved, std::mt19937& rng) {
    for (int a : moved) chunk_of_[a] = -1;
    for (int a : moved) {
      std::vector<int> free;
      for (int c = 0; c < kChunks; ++c) {
        if (Owners(c).empty()) free.push_back(c);
      }
      chunk_of_[a] = rng() % 2 == 0 ? free.front() : free[rng() % free.size()];
    }
  }
  // The array of parameter `from` passed for parameter `to` too.
  void PassForBoth(int to, int from) { chunk_of_[to] = chunk_of_[from]; }

 private:
  uint64_t base_ = 0;
  std::vector<int> chunk_of_;  // -1: no memory
};

// A kernel argument: a slice of a buffer allocation (XLA's BufferAllocation::Slice: the
// allocation and an offset; the recording gives its address) or a value of `size` bytes.
struct Arg {
  int alloc;        // -1: a value
  uint64_t offset;  // the slice's offset, or the value's bits
  uint32_t size;
};
Arg At(int alloc, uint64_t offset = 0) { return {alloc, offset, 8}; }
Arg U64(uint64_t v) { return {-1, v, 8}; }
Arg F32(float f) { return {-1, Bits(f), 4}; }

// The test kernels the program's kernel commands launch.
enum class Fn { kAdd, kAxpy, kCopy, kDistance };

void* Function(Fn f) {
  switch (f) {
    case Fn::kAdd: return k.add;
    case Fn::kAxpy: return k.axpy;
    case Fn::kCopy: return k.copy;
    case Fn::kDistance: return k.distance;
  }
  return nullptr;
}

// One command of the replayed command sequence.
struct Command {
  enum Kind {
    kKernel,      // KernelArgsPackedArray: the bridge names the slices (0004)
    kScanKernel,  // another packing (sizes known, kinds not): every argument scanned
    kMemcpy,      // args: dst, src; `count` bytes
    kMemset,      // args: dst; `count` elements of `element` bytes set to `pattern`
    kChild,       // a control-flow command: a nested command buffer cloned as a child node
    kTraced,      // a traced command: a nested command buffer captured on the trace stream
    kParams,      // a kernel whose argument sizes XLA does not know (kernelParams)
  } kind;
  Fn fn = Fn::kAdd;
  std::vector<Arg> args;
  uint64_t count = 0;
  uint32_t pattern = 0, element = 0;
  bool on_initialize = false;  // requires_update_on_initialize (collectives)
  bool on_execute = false;     // requires_update_on_execute
  std::set<int> uses;          // the allocations of its buffer uses

  explicit Command(Kind k) : kind(k) {}
  static Command WithArgs(Kind kind, std::vector<Arg> args) {
    Command c(kind);
    c.args = std::move(args);
    for (const Arg& a : c.args) {
      if (a.alloc >= 0) c.uses.insert(a.alloc);
    }
    return c;
  }
  static Command Kernel(Kind kind, Fn fn, std::vector<Arg> args) {
    Command c = WithArgs(kind, std::move(args));
    c.fn = fn;
    return c;
  }
  static Command Memcpy(Arg dst, Arg src, uint64_t bytes) {
    Command c = WithArgs(kMemcpy, {dst, src});
    c.count = bytes;
    return c;
  }
  static Command Memset(Arg dst, uint32_t pattern, uint32_t element, uint64_t count) {
    Command c = WithArgs(kMemset, {dst});
    c.pattern = pattern;
    c.element = element;
    c.count = count;
    return c;
  }
  static Command Nested(Kind kind, std::set<int> uses) {
    Command c(kind);
    c.uses = std::move(uses);
    return c;
  }
};

// Which commands the program holds beyond its kernels, memcpys and memsets, and how XLA treats
// them.
struct Shape {
  bool warmup = true;   // the commands require a warm-up execution through thunks
  bool child = false;   // a nested command buffer (control flow) cloned as a child node
  bool traced = false;  // a traced command: a captured nested command buffer
  bool params = false;  // a kernel whose argument sizes XLA does not know (kernelParams)
  bool scan_param = false;  // a kernel of another packing reads parameter 1 by its address
  bool aliased_first = false;  // the first execution gets one array for both parameters
  bool update_on_execute = false;  // the traced command requires an update on every execution
  // The traced command requires an update on initialize (as collectives do), and so does a
  // command over persistent allocations only; the temp allocation is persistent (its address
  // kept stable, as VA remapping keeps it).
  bool update_on_initialize = false;
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

// The allocations a kernel's argument given by address (not named) may come from, as the header
// states the rule (rcb_allocation): those containing it and those of non-zero size ending at it
// (an end pointer); where neither, the empty ones at it. Two or more: the address is ambiguous.
std::vector<int> Candidates(const std::vector<rcb_allocation>& table, uint64_t p) {
  std::vector<int> inside, ending, empty;
  for (int a = 0; a < static_cast<int>(table.size()); ++a) {
    const rcb_allocation& t = table[a];
    if (t.size == 0) {
      if (t.base == p) empty.push_back(a);
    } else if (t.base <= p && p - t.base < t.size) {
      inside.push_back(a);
    } else if (t.base + t.size == p) {
      ending.push_back(a);
    }
  }
  if (!inside.empty()) {
    inside.insert(inside.end(), ending.begin(), ending.end());
    return inside;
  }
  if (!ending.empty()) {
    ending.insert(ending.end(), empty.begin(), empty.end());
    return ending;
  }
  return empty;
}

// Kernel launches as the bridge converts them.
rcb_kernel_launch Launch(void* f, const rcb_kernel_arg* args, size_t n) {
  return rcb_kernel_launch{sizeof(rcb_kernel_launch), f, {1, 1, 1}, {256, 1, 1}, 0, args, n};
}

// The replayed CommandBufferCmd sequence (a chain, in command order) and its computation on
// the host.
class Program {
 public:
  explicit Program(Shape shape) : shape_(shape) {
    using C = Command;
    const uint64_t half = kN / 2, quarter = kN / 4;
    commands_ = {
        C::Memset(At(kO2), 0, 1, kBytes),  // a u8 BitPattern: element size 1, not broadcast
        C::Kernel(C::kKernel, Fn::kAdd, {At(kO2), At(kP0), At(kP1), U64(kN)}),
        // axpy over interior slices of the output and of parameter 0.
        C::Kernel(C::kKernel, Fn::kAxpy, {At(kO2, 512), At(kP0, 256), F32(2.0f), U64(half)}),
        C::Memcpy(At(kO3), At(kO2), kBytes),
        C::Kernel(C::kScanKernel, Fn::kCopy, {At(kO4), At(kO3), U64(kBytes)}),
        C::Kernel(C::kKernel, Fn::kAdd, {At(kO5), At(kO4), At(kP1), U64(kN)}),
        // The constant read by a kernel, into the temp allocation.
        C::Kernel(C::kKernel, Fn::kAdd, {At(kTemp), At(kP0), At(kConst), U64(kN)}),
        // The temp allocation through two overlapping interior slices (floats 64..192 and
        // 128..256), and through an interior slice copied to an interior slice; a 32-bit memset
        // of an interior slice.
        C::Kernel(C::kKernel, Fn::kAdd, {At(kO12), At(kTemp, 256), At(kTemp, 512), U64(half)}),
        C::Memcpy(At(kO12, 512), At(kTemp, 768), kBytes / 4),
        C::Memset(At(kO12, 768), Bits(1.0f), 4, quarter),
        // Ranges given as a begin slice and a size-0 slice one past the allocation's end (the
        // next allocation's base whenever one is packed right after it): a parameter, the
        // constant, the temp allocation, an empty range at an output's end, the other parameter.
        C::Kernel(C::kKernel, Fn::kDistance, {At(kDist, 0), At(kP0, 256), At(kP0, kBytes)}),
        C::Kernel(C::kKernel, Fn::kDistance, {At(kDist, 8), At(kConst, 0), At(kConst, kBytes)}),
        C::Kernel(C::kKernel, Fn::kDistance, {At(kDist, 16), At(kTemp, 512), At(kTemp, kBytes)}),
        C::Kernel(C::kKernel, Fn::kDistance, {At(kDist, 24), At(kO2, kBytes), At(kO2, kBytes)}),
        C::Kernel(C::kKernel, Fn::kDistance, {At(kDist, 32), At(kP1, 0), At(kP1, kBytes)}),
    };
    if (shape_.scan_param) {
      // Parameter 1 seen only by its address: while one array is passed for both parameters
      // the address lies in both allocations.
      commands_.push_back(C::Kernel(C::kScanKernel, Fn::kCopy, {At(kDist, 512), At(kP1), U64(kBytes / 4)}));
    }
    if (shape_.update_on_initialize) {
      // A collective-like command over persistent allocations only (XLA never updates it).
      Command c = C::Kernel(C::kKernel, Fn::kAxpy, {At(kTemp), At(kConst), F32(1.0f), U64(quarter)});
      c.on_initialize = true;
      commands_.push_back(c);
    }
    if (shape_.child) commands_.push_back(C::Nested(C::kChild, {kO5, kO6, kO7}));
    if (shape_.traced) {
      Command c = C::Nested(C::kTraced, {kP0, kO5, kO8});
      c.on_execute = shape_.update_on_execute;
      c.on_initialize = shape_.update_on_initialize;
      commands_.push_back(c);
    }
    if (shape_.params) commands_.push_back(C::Nested(C::kParams, {kO5, kO9}));
  }

  const std::vector<Command>& commands() const { return commands_; }
  bool warmup() const { return shape_.warmup; }
  // Whether every command is a kernel, memcpy or memset: nodes whose every address is a patch
  // site, so that only an ambiguous address can make the library refuse a move.
  bool only_patchable() const { return !shape_.child && !shape_.traced && !shape_.params; }
  bool aliased_first() const { return shape_.aliased_first; }

  // The executable's persistent allocations (sorted): the constant, and the temp allocation
  // where its address is kept stable.
  std::vector<int> Persistent() const {
    return shape_.update_on_initialize ? std::vector<int>{kConst, kTemp} : std::vector<int>{kConst};
  }
  // CommandExecutor::allocs_indices: every allocation a command uses, sorted.
  std::vector<int> Used() const {
    std::set<int> used;
    for (const Command& c : commands_) used.insert(c.uses.begin(), c.uses.end());
    return {used.begin(), used.end()};
  }
  bool RequiresUpdateOnExecute() const {
    return std::any_of(commands_.begin(), commands_.end(), [](const Command& c) { return c.on_execute; });
  }
  bool RequiresUpdateOnInitialize() const {
    return std::any_of(commands_.begin(), commands_.end(), [](const Command& c) { return c.on_initialize; });
  }
  // The allocations the commands write, in the order a check reports them.
  std::set<int> Outputs() const {
    std::set<int> out = {kO2, kO3, kO4, kO5, kTemp, kO12, kDist};
    if (shape_.child) out.insert({kO6, kO7});
    if (shape_.traced) out.insert(kO8);
    if (shape_.params) out.insert(kO9);
    return out;
  }

  // A fresh record at the arena's addresses (the reference every execution is compared with):
  // a new primary command buffer, the table, every command with addresses only, finalize.
  std::unique_ptr<Recorded> Create(const Arena& arena) const {
    auto r = std::make_unique<Recorded>();
    OK(rcb::CmdBuf::Create(0, &r->cb));
    OK(r->cb.SetAllocations(arena.Table()));
    RecordCreate(*r, arena, nullptr);
    OK(r->cb.Finalize());  // InstantiateGraph
    return r;
  }

  // CommandExecutor::RecordCreate: every command, in a chain. With `naming`, the table the
  // command buffer was given: each KernelThunk's slices are named against it (0004).
  void RecordCreate(Recorded& r, const Arena& arena, const std::vector<rcb_allocation>* naming) const {
    r.nodes.assign(commands_.size(), 0);
    for (size_t c = 0; c < commands_.size(); ++c) {
      std::vector<rcb_node> deps;
      if (c > 0) deps.push_back(r.nodes[c - 1]);
      Record(r, c, arena, naming, deps, /*update=*/false);
    }
  }

  // CommandExecutor::RecordUpdate and its skip_command_update: `updated` is the thunk's
  // UpdateBufferAllocations (sorted, an index possibly repeated); returns the commands recorded.
  int RecordUpdate(Recorded& r, const Arena& arena, const std::vector<rcb_allocation>* naming,
                   const std::vector<int>& updated, bool is_initialization) const {
    std::vector<int> persistent = Persistent();
    int recorded = 0;
    for (size_t c = 0; c < commands_.size(); ++c) {
      const Command& cmd = commands_[c];
      bool skip = false;
      if (!cmd.on_execute) {
        if (!(is_initialization && cmd.on_initialize)) {
          skip = std::none_of(updated.begin(), updated.end(), [&](int a) { return cmd.uses.count(a) > 0; });
        }
        skip = skip || std::includes(persistent.begin(), persistent.end(), cmd.uses.begin(), cmd.uses.end());
      }
      if (skip) continue;
      Record(r, c, arena, naming, {}, /*update=*/true);
      ++recorded;
    }
    return recorded;
  }

  // What the commands compute, on the host, in `image` (the arena's bytes, at the addresses of
  // `arena`), in command order: the result the user needs, whatever records it.
  void Compute(const Arena& arena, std::vector<uint8_t>& image) const {
    auto at = [&](uint64_t address) { return image.data() + (address - arena.base()); };
    auto f32 = [&](uint64_t address, uint64_t i) {
      float v;
      std::memcpy(&v, at(address + 4 * i), 4);
      return v;
    };
    auto set_f32 = [&](uint64_t address, uint64_t i, float v) { std::memcpy(at(address + 4 * i), &v, 4); };
    auto add = [&](uint64_t out, uint64_t x, uint64_t y, uint64_t n) {
      for (uint64_t i = 0; i < n; ++i) set_f32(out, i, f32(x, i) + f32(y, i));
    };
    for (const Command& c : commands_) {
      std::vector<uint64_t> a;
      for (const Arg& arg : c.args) a.push_back(arg.alloc >= 0 ? arena.Address(arg.alloc) + arg.offset : arg.offset);
      switch (c.kind) {
        case Command::kKernel:
        case Command::kScanKernel:
          switch (c.fn) {
            case Fn::kAdd: add(a[0], a[1], a[2], a[3]); break;
            case Fn::kAxpy: {
              float alpha;
              uint32_t bits = static_cast<uint32_t>(a[2]);
              std::memcpy(&alpha, &bits, 4);
              for (uint64_t i = 0; i < a[3]; ++i) set_f32(a[0], i, f32(a[0], i) + alpha * f32(a[1], i));
              break;
            }
            case Fn::kCopy: std::memmove(at(a[0]), at(a[1]), a[2]); break;
            case Fn::kDistance: {
              uint64_t d = a[2] - a[1];
              std::memcpy(at(a[0]), &d, 8);
              break;
            }
          }
          break;
        case Command::kMemcpy: std::memmove(at(a[0]), at(a[1]), c.count); break;
        case Command::kMemset:
          for (uint64_t i = 0; i < c.count; ++i) std::memcpy(at(a[0] + i * c.element), &c.pattern, c.element);
          break;
        case Command::kChild:  // fill 6 with 0.5, then 7 = 6 + 5
          for (uint64_t i = 0; i < kN; ++i) set_f32(arena.Address(kO6), i, 0.5f);
          add(arena.Address(kO7), arena.Address(kO6), arena.Address(kO5), kN);
          break;
        case Command::kTraced: add(arena.Address(kO8), arena.Address(kO5), arena.Address(kP0), kN); break;
        case Command::kParams: add(arena.Address(kO9), arena.Address(kO5), arena.Address(kO5), kN); break;
      }
    }
  }

 private:
  void Record(Recorded& r, size_t c, const Arena& arena, const std::vector<rcb_allocation>* naming,
              const std::vector<rcb_node>& deps, bool update) const {
    const Command& cmd = commands_[c];
    rcb::CmdBuf& cb = r.cb;
    rcb_node& node = r.nodes[c];
    std::vector<uint64_t> words(cmd.args.size());
    for (size_t i = 0; i < cmd.args.size(); ++i) {
      const Arg& arg = cmd.args[i];
      words[i] = arg.alloc >= 0 ? arena.Address(arg.alloc) + arg.offset : arg.offset;
    }
    switch (cmd.kind) {
      case Command::kKernel:
      case Command::kScanKernel: {
        std::vector<rcb_kernel_arg> args;
        std::vector<Slice> slices;
        for (size_t i = 0; i < cmd.args.size(); ++i) {
          const Arg& arg = cmd.args[i];
          uint32_t kind = cmd.kind == Command::kScanKernel ? RCB_ARG_SCAN
                          : arg.alloc >= 0                  ? RCB_ARG_DEVICE_PTR
                                                            : RCB_ARG_VALUE;
          args.push_back({&words[i], arg.size, kind});
          slices.push_back({arg.alloc, arg.alloc >= 0 ? static_cast<int64_t>(arg.offset) : 0});
        }
        // KernelThunk::Record gives each argument's slice and the bridge names the pointers
        // (0004); other packings are never named.
        std::vector<rcb_arg_allocation> named;
        if (naming != nullptr && cmd.kind == Command::kKernel) NameAllocations(slices, *naming, args, named);
        rcb_kernel_launch launch = Launch(Function(cmd.fn), args.data(), args.size());
        if (update) OK(cb.UpdateKernel(node, launch));
        else OK(cb.AddKernel(deps, launch, &node));
        return;
      }
      case Command::kMemcpy:
        if (update) OK(cb.UpdateMemcpyD2D(node, words[0], words[1], cmd.count));
        else OK(cb.AddMemcpyD2D(deps, words[0], words[1], cmd.count, &node));
        return;
      case Command::kMemset:
        if (update) OK(cb.UpdateMemset(node, words[0], cmd.pattern, cmd.element, cmd.count));
        else OK(cb.AddMemset(deps, words[0], cmd.pattern, cmd.element, cmd.count, &node));
        return;
      case Command::kChild: return Child(r, c, arena, deps, update);
      case Command::kTraced: return Traced(r, c, arena, deps, update);
      case Command::kParams: {
        uint64_t out = arena.Address(kO9), x = arena.Address(kO5), n = kN;
        void* params[] = {&out, &x, &x, &n};
        rcb_kernel_params_launch launch{sizeof(rcb_kernel_params_launch), k.add, {1, 1, 1}, {256, 1, 1}, 0, params};
        if (update) OK(cb.UpdateKernelParams(node, launch));
        else OK(cb.AddKernelParams(deps, launch, &node));
        return;
      }
    }
  }

  // A control-flow command: its nested command buffer is recorded (or updated) and finalized,
  // then cloned into the primary (CreateChildCommand / UpdateChildCommand). A nested command
  // buffer names nothing (0004 names only in primary ones).
  void Child(Recorded& r, size_t c, const Arena& arena, const std::vector<rcb_node>& deps, bool update) const {
    uint64_t a6 = arena.Address(kO6), a7 = arena.Address(kO7), a5 = arena.Address(kO5), n = kN;
    uint32_t half = Bits(0.5f);
    rcb_kernel_arg fill[] = {{&a6, 8, RCB_ARG_DEVICE_PTR}, {&half, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    rcb_kernel_arg add[] = {{&a7, 8, RCB_ARG_DEVICE_PTR}, {&a6, 8, RCB_ARG_DEVICE_PTR},
                            {&a5, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    if (!update) {
      OK(rcb::CmdBuf::CreateNested(0, &r.nested));
      OK(r.nested.AddKernel({}, Launch(k.fill, fill, 3), &r.nested_fill));
      OK(r.nested.AddKernel({r.nested_fill}, Launch(k.add, add, 4), &r.nested_add));
      OK(r.nested.Finalize());
      OK(r.cb.AddChild(deps, r.nested, &r.nodes[c]));
      return;
    }
    OK(r.nested.BeginUpdate());
    OK(r.nested.UpdateKernel(r.nested_fill, Launch(k.fill, fill, 3)));
    OK(r.nested.UpdateKernel(r.nested_add, Launch(k.add, add, 4)));
    OK(r.nested.Finalize());
    OK(r.cb.UpdateChild(r.nodes[c], r.nested));
  }

  // A traced command: TraceCommandBufferFactory captures a nested command buffer on the trace
  // stream (a miss of XLA's trace cache traces again at the new addresses).
  void Traced(Recorded& r, size_t c, const Arena& arena, const std::vector<rcb_node>& deps, bool update) const {
    rcb::CmdBuf traced;
    OK(rcb::CmdBuf::CreateNested(0, &traced));
    OK(traced.CaptureBegin(gpu->stream()));
    uint64_t out = arena.Address(kO8), x = arena.Address(kO5), y = arena.Address(kP0), n = kN;
    void* params[] = {&out, &x, &y, &n};
    gpu->Launch(k.add, 1, 256, params);
    OK(traced.CaptureEnd());
    OK(traced.Finalize());
    if (update) OK(r.cb.UpdateChild(r.nodes[c], traced));
    else OK(r.cb.AddChild(deps, traced, &r.nodes[c]));
    r.traced = std::move(traced);
  }

  Shape shape_;
  std::vector<Command> commands_;
};

// The inputs of execution `step`: the parameters' arrays (when one array is passed for both,
// it holds x) and the constant. Small integers, halves and quarters: every sum and product the
// kernels make is exact, so the host's result is bit for bit the device's (fused or not).
struct Inputs {
  std::vector<float> x, y, constant;
  explicit Inputs(int step) : x(kN), y(kN), constant(kN) {
    for (uint64_t i = 0; i < kN; ++i) {
      x[i] = static_cast<float>((i * 7 + step) % 13) - 6.0f;
      y[i] = static_cast<float>((i * 5 + 3 * step) % 11) * 0.25f;
      constant[i] = static_cast<float>(i % 17) * 0.5f - 3.0f;
    }
  }
};

// The arena's bytes before a launch: the parameters' arrays and the constant, garbage in every
// output, the guard pattern everywhere else.
std::vector<uint8_t> Before(const Arena& arena, const Program& program, const Inputs& in) {
  std::vector<uint8_t> image(kChunk * kChunks, kGuard);
  std::set<int> outputs = program.Outputs();
  for (int a : outputs) std::memset(image.data() + (arena.Address(a) - arena.base()), kGarbage, kBytes);
  std::memcpy(image.data() + (arena.Address(kConst) - arena.base()), in.constant.data(), kBytes);
  std::memcpy(image.data() + (arena.Address(kP1) - arena.base()), in.y.data(), kBytes);
  std::memcpy(image.data() + (arena.Address(kP0) - arena.base()), in.x.data(), kBytes);
  return image;
}

// One execution: the arena written as Before gives it, the launch, the arena read back.
std::vector<uint8_t> Execute(rcb::CmdBuf& cb, const Arena& arena, const std::vector<uint8_t>& before) {
  gpu->Write(arena.base(), before.data(), before.size());
  OK(cb.Launch(gpu->stream()));
  gpu->Sync();
  std::vector<uint8_t> after(before.size());
  gpu->Read(after.data(), arena.base(), after.size());
  return after;
}

// Says where two arenas first differ: the chunk, what it holds, the byte.
void Differ(const char* what, const char* name, int step, const Arena& arena, const std::vector<uint8_t>& got,
            const std::vector<uint8_t>& want) {
  auto first = std::mismatch(got.begin(), got.end(), want.begin());
  if (first.first == got.end()) return;
  size_t byte = static_cast<size_t>(first.first - got.begin());
  int chunk = static_cast<int>(byte / kChunk);
  std::vector<int> owners = arena.Owners(chunk);
  char holds[64] = "a free chunk";
  if (!owners.empty()) std::snprintf(holds, sizeof holds, "allocation %d%s", owners[0], owners.size() > 1 ? " (aliased)" : "");
  CHECK_RESULT(false, "%s step %d: the arena differs from %s at chunk %d (%s), byte %zu: 0x%02x, want 0x%02x", name,
               step, what, chunk, holds, byte % kChunk, *first.first, *first.second);
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
  MoveLog log;
  // The executions at which the summary was due, and the last summary.
  std::vector<uint64_t> summaries;
  std::string summary;  // the last one

  Bridge() { OK(rcb::CmdBuf::Create(0, &r.cb)); }
  // RocmCmdbufCommandBuffer::LogMovesIfDue.
  void LogIfDue(bool due) {
    if (!due) return;
    summaries.push_back(log.executions());
    summary = log.Summary();
  }
  void SetAllocations(const std::vector<rcb_allocation>& t) {
    table = t;
    pending = state == State::kFinalized;
    if (!pending) OK(r.cb.SetAllocations(table));
  }
  // Whether every move was patched in place; false sends the thunk down the recording path.
  bool MoveAllocations(const std::vector<rcb_allocation_move>& moves, const std::vector<rcb_allocation>& now,
                       rcb_update_report* report) {
    for (const rcb_allocation_move& m : moves) {
      // A new allocation, or one whose size changed: recorded again.
      if (m.index >= table.size() || table[m.index].size != now[m.index].size) {
        LogIfDue(log.Count(MoveLog::Outcome::kTableChanged));
        return false;
      }
    }
    rcb_counters before{};
    before.struct_size = sizeof before;
    OK(rcb::CountersGet(r.cb.get(), &before));
    // A failed call is logged and counted by the bridge, and the command buffer recorded again.
    if (!r.cb.MoveAllocations(moves, report).ok()) {
      LogIfDue(log.Count(MoveLog::Outcome::kMoveFailed));
      return false;
    }
    if (report->needs_rerecord) {
      rcb_counters after = before;
      OK(rcb::CountersGet(r.cb.get(), &after));
      LogIfDue(log.CountLibraryRefusal(before, after));
      return false;
    }
    for (const rcb_allocation_move& m : moves) table[m.index].base = m.base;
    LogIfDue(log.Count(MoveLog::Outcome::kMovedInPlace));
    return true;
  }
  // GpuCommandBuffer::Update: CheckCanBeUpdated.
  void Update() {
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
  int steps = 0, in_place = 0, recorded = 0, recorded_at_initialize = 0, idle = 0, move_calls = 0;
  int commands_recorded_again = 0;  // by RecordUpdate
  // How often the cases this replay exists for came up: executions with the parameters
  // aliased, moves that parted them, executions where a range's end one past its allocation was
  // another allocation's base.
  int aliased = 0, parted = 0, end_on_a_base = 0;
  // Moves refused because they part the allocations an address given without a name may come
  // from (an argument of another packing at one allocation's end and the next one's base, or in
  // two aliased parameters).
  int refused_ambiguous = 0;
  // Executions recorded again because they were the first record, or because a command requires
  // an update on every execution.
  int first_records = 0, every_execution = 0;
};

// The move log counted every execution after the warm-up as this replay did: moved in place,
// unchanged, recorded again, each recording by its reason, with the summary due at the 1st, 10th,
// 100th, ... execution and naming those counts.
void CheckMoveLog(const char* name, const Bridge& bridge, const Counts& counts, bool only_patchable) {
  const MoveLog& log = bridge.log;
  using O = MoveLog::Outcome;
  uint64_t executions = static_cast<uint64_t>(counts.in_place + counts.recorded + counts.idle);
  CHECK(log.executions() == executions && log.count(O::kMovedInPlace) == uint64_t(counts.in_place) &&
            log.count(O::kUnchanged) == uint64_t(counts.idle) && log.recorded_again() == uint64_t(counts.recorded),
        "%s: the move log counted %llu executions (%llu in place, %llu unchanged, %llu recorded again), the replay "
        "%llu (%d, %d, %d)",
        name, (unsigned long long)log.executions(), (unsigned long long)log.count(O::kMovedInPlace),
        (unsigned long long)log.count(O::kUnchanged), (unsigned long long)log.recorded_again(),
        (unsigned long long)executions, counts.in_place, counts.idle, counts.recorded);
  uint64_t by_reason = 0;
  for (int i = static_cast<int>(O::kFirstRecord); i < MoveLog::kOutcomes; ++i) by_reason += log.count(O(i));
  for (uint32_t i = 0; i <= RCB_FALLBACK_REASON_SLOTS; ++i) by_reason += log.library_refusals(i);
  CHECK(by_reason == log.recorded_again(), "%s: %llu recordings by reason, %llu recorded again", name,
        (unsigned long long)by_reason, (unsigned long long)log.recorded_again());
  CHECK(log.count(O::kFirstRecord) == uint64_t(counts.first_records) &&
            log.count(O::kRequiresUpdateOnExecute) == uint64_t(counts.every_execution),
        "%s: first records %llu (replay %d), every execution %llu (replay %d)", name,
        (unsigned long long)log.count(O::kFirstRecord), counts.first_records,
        (unsigned long long)log.count(O::kRequiresUpdateOnExecute), counts.every_execution);
  // Every move parting the allocations an unnamed address may come from was refused by the
  // library, for that reason where every other address is a patch site (elsewhere the refusal
  // may name a reason the library found first, such as a cloned child node).
  uint64_t library = 0;
  for (uint32_t i = 0; i <= RCB_FALLBACK_REASON_SLOTS; ++i) library += log.library_refusals(i);
  uint64_t overlapping = log.library_refusals(RCB_FALLBACK_OVERLAPPING_ALLOCATIONS);
  CHECK(library >= uint64_t(counts.refused_ambiguous) &&
            (!only_patchable || overlapping == uint64_t(counts.refused_ambiguous)),
        "%s: %llu refusals by the library, %llu for overlapping allocations, the replay %d such moves", name,
        (unsigned long long)library, (unsigned long long)overlapping, counts.refused_ambiguous);
  std::vector<uint64_t> due;
  for (uint64_t n = 1; n <= executions; n *= 10) due.push_back(n);
  CHECK(bridge.summaries == due, "%s: %zu summaries logged, %zu due", name, bridge.summaries.size(), due.size());
  // The summary names those counts.
  char want[160];
  std::snprintf(want, sizeof want, "%llu executions: %d moved in place, %d unchanged, %d recorded again",
                (unsigned long long)executions, counts.in_place, counts.idle, counts.recorded);
  std::string summary = log.Summary();
  CHECK(summary.rfind(want, 0) == 0, "%s: summary \"%s\", want it to begin \"%s\"", name, summary.c_str(), want);
  std::printf("%s: move log (VLOG(1) at executions 1, 10, 100, ...), the last one logged: %s\n", name,
              bridge.summary.c_str());
}

// `steps` executions of one CommandBufferThunk while the allocator moves allocations (all but the
// persistent ones, those the commands use or not) and passes one array for both parameters or
// parts them, replayed as the patched XLA at the pinned commit makes them (see the top of the
// file). Each execution's arena is compared with a fresh record's and with the host's result.
Counts Run(const char* name, Shape shape, int steps, unsigned seed) {
  Program program(shape);
  Arena arena;
  std::mt19937 rng(seed);
  Bridge bridge;
  const std::vector<int> persistent = program.Persistent();
  const std::vector<int> used = program.Used();
  std::vector<int> dynamic;  // the commands' allocations less the persistent ones, sorted
  std::set_difference(used.begin(), used.end(), persistent.begin(), persistent.end(), std::back_inserter(dynamic));
  // HasDynamicAllocations.
  const bool has_dynamic = !std::includes(persistent.begin(), persistent.end(), used.begin(), used.end());
  std::vector<int> movable;  // every allocation with memory that is not persistent
  for (int a = 0; a < kAllocs; ++a) {
    if (a != kLocal && !std::binary_search(persistent.begin(), persistent.end(), a)) movable.push_back(a);
  }
  if (program.aliased_first()) arena.PassForBoth(kP1, kP0);
  bool warmup_done = false;
  std::vector<uint64_t> recorded;  // ExecutorCommandBuffer::recorded_allocs (0: never set)
  // UpdateBufferAllocations.
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
  // The allocations each address the library got without a name (the arguments of kernels of
  // another packing) may come from, as the last recording left them (moves in place keep them),
  // where there are several: a move that parts one of these sets must be refused.
  std::vector<std::vector<int>> ambiguous;
  auto attribute = [&] {
    ambiguous.clear();
    for (const Command& c : program.commands()) {
      if (c.kind != Command::kScanKernel) continue;
      for (const Arg& a : c.args) {
        if (a.alloc < 0) continue;
        std::vector<int> set = Candidates(bridge.table, bridge.table[a.alloc].base + a.offset);
        if (set.size() > 1) ambiguous.push_back(set);
      }
    }
  };
  auto parts = [&](const std::vector<rcb_allocation_move>& moves) {
    auto delta = [&](int a) {
      for (const rcb_allocation_move& m : moves) {
        if (m.index == static_cast<uint64_t>(a)) return m.base - bridge.table[a].base;
      }
      return uint64_t{0};
    };
    return std::any_of(ambiguous.begin(), ambiguous.end(), [&](const std::vector<int>& set) {
      return std::any_of(set.begin(), set.end(), [&](int a) { return delta(a) != delta(set[0]); });
    });
  };
  // CommandExecutor::Record.
  Counts counts;
  auto record = [&](const std::vector<int>& updated, bool is_initialization) {
    if (bridge.state == Bridge::State::kFinalized) bridge.Update();
    if (bridge.state == Bridge::State::kUpdate) {
      counts.commands_recorded_again +=
          program.RecordUpdate(bridge.r, arena, &bridge.table, updated, is_initialization);
    } else {
      program.RecordCreate(bridge.r, arena, &bridge.table);
    }
    bridge.Finalize();
    attribute();
  };

  for (int step = 0; step < steps; ++step, ++counts.steps) {
    if (step > 1) {
      // Between executions the allocator gives some allocations new buffers (sometimes none),
      // and the caller may pass one array for both parameters, or a new one for both.
      bool was_aliased = arena.ParametersAliased();
      std::set<int> moved;
      size_t how_many = rng() % 4;
      while (moved.size() < how_many) moved.insert(movable[rng() % movable.size()]);
      switch (rng() % 6) {
        case 0: arena.PassForBoth(kP1, kP0); break;
        case 1: arena.PassForBoth(kP0, kP1); break;
        case 2:
          moved.erase(kP1);
          moved.insert(kP0);
          break;
        default: break;
      }
      bool both_new = moved.count(kP0) > 0 && !was_aliased && rng() % 2 == 0;
      arena.Reallocate(moved, rng);
      if (both_new) arena.PassForBoth(kP1, kP0);
      if (was_aliased && !arena.ParametersAliased()) ++counts.parted;
    }
    if (arena.ParametersAliased()) ++counts.aliased;
    for (int a : {kP0, kConst, kTemp, kO2, kP1}) {
      int next = arena.ChunkAt(arena.Address(a) + kBytes);
      if (next >= 0 && !arena.Owners(next).empty()) {
        ++counts.end_on_a_base;
        break;
      }
    }

    // Initialize.
    if (!program.warmup()) warmup_done = true;
    if (warmup_done &&
        (bridge.state == Bridge::State::kCreate || (has_dynamic && program.RequiresUpdateOnInitialize()))) {
      std::vector<int> updated = update_buffer_allocations();
      // 0004's hook: after UpdateBufferAllocations, before the recording.
      bridge.SetAllocations(arena.Table());
      record(updated, /*is_initialization=*/true);
      ++counts.recorded_at_initialize;
    }

    // ExecuteOnStream.
    Inputs inputs(step);
    std::vector<uint8_t> before = Before(arena, program, inputs);
    std::vector<uint8_t> got;
    if (!warmup_done) {
      // The warm-up runs the thunks, not a command buffer: the same commands launched once (a
      // fresh record stands in for them here).
      std::unique_ptr<Recorded> thunks = program.Create(arena);
      got = Execute(thunks->cb, arena, before);
      warmup_done = true;
    } else {
      bool is_first_record = bridge.state == Bridge::State::kCreate;
      std::vector<int> updated = update_buffer_allocations();
      bool requires_update_on_execute = program.RequiresUpdateOnExecute();
      bool needs_update = requires_update_on_execute || !updated.empty();
      // MoveCommandBufferAllocations (0004): after UpdateBufferAllocations and needs_update,
      // before the recording.
      bool moved_in_place = false;
      if (!is_first_record && needs_update && !requires_update_on_execute && !updated.empty() &&
          bridge.state == Bridge::State::kFinalized) {
        std::vector<int> indices = updated;
        std::sort(indices.begin(), indices.end());
        indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
        std::vector<rcb_allocation_move> moves;
        for (int a : indices) moves.push_back({static_cast<uint64_t>(a), arena.Address(a)});
        rcb_update_report report{};
        ++counts.move_calls;
        bool must_refuse = parts(moves);
        moved_in_place = bridge.MoveAllocations(moves, arena.Table(), &report);
        if (moved_in_place) {
          CHECK(report.patched_sites > 0 && report.updated_nodes > 0, "%s step %d: a move patched nothing", name,
                step);
        }
        CHECK(!(must_refuse && moved_in_place),
              "%s step %d: moved in place although it parts allocations an unnamed address may come from", name, step);
        // With every other address a patch site, an ambiguous one is the only reason to refuse.
        if (program.only_patchable()) {
          CHECK(must_refuse || moved_in_place, "%s step %d: refused with no address ambiguous", name, step);
        }
        counts.refused_ambiguous += must_refuse;
      } else {
        // CountUnmovedExecution, with WhyUnmoved's reason (command_buffer_allocation_moves.cc).
        MoveLog::Outcome why = is_first_record                ? MoveLog::Outcome::kFirstRecord
                               : !needs_update                ? MoveLog::Outcome::kUnchanged
                               : requires_update_on_execute ? MoveLog::Outcome::kRequiresUpdateOnExecute
                                                              : MoveLog::Outcome::kNotFinalized;
        bridge.LogIfDue(bridge.log.Count(why));
        counts.first_records += is_first_record;
        counts.every_execution += !is_first_record && requires_update_on_execute;
      }
      if (moved_in_place) {
        needs_update = false;
        ++counts.in_place;
      } else if (is_first_record || needs_update) {
        bridge.SetAllocations(arena.Table());
      }
      if (is_first_record || needs_update) {
        ++counts.recorded;
        record(updated, /*is_initialization=*/is_first_record && !has_dynamic);
      } else if (!moved_in_place) {
        ++counts.idle;
      }
      got = Execute(bridge.r.cb, arena, before);
    }
    std::unique_ptr<Recorded> fresh = program.Create(arena);
    std::vector<uint8_t> expected = Execute(fresh->cb, arena, before);
    std::vector<uint8_t> host = before;
    program.Compute(arena, host);
    Differ("a fresh record's", name, step, arena, got, expected);
    Differ("the host's result", name, step, arena, got, host);
  }
  std::printf("%s: %d executions%s: %d moved in place, %d recorded again at execution, %d recorded at "
              "initialize (%d commands recorded again in all), %d with nothing to update at execution; parameters "
              "aliased in %d and parted %d times, a range's end on another allocation's base in %d; %d move(s) "
              "parting the allocations an unnamed address may come from\n",
              name, counts.steps, program.warmup() ? " (the first through thunks)" : "", counts.in_place,
              counts.recorded, counts.recorded_at_initialize, counts.commands_recorded_again, counts.idle,
              counts.aliased, counts.parted, counts.end_on_a_base, counts.refused_ambiguous);
  CheckMoveLog(name, bridge, counts, program.only_patchable());
  // The cases must have come up, or the run proved nothing about them.
  CHECK(counts.aliased > 0 && counts.parted > 0 && counts.end_on_a_base > steps / 2,
        "%s: aliased %d, parted %d, a range's end on a base %d of %d", name, counts.aliased, counts.parted,
        counts.end_on_a_base, steps);
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
       device.Function("rcb_test_axpy_f32"), device.Function("rcb_test_copy_u8"),
       device.Function("rcb_test_distance_u64")};

  // Kernels, memcpys and memsets only, every pointer of a KernelThunk named: never recorded
  // again for a move, whatever aliases, parts or lands next to what, except one that parts the
  // allocations an address of the kernel of another packing may come from (its operands' bases,
  // each the end of the allocation packed before it).
  Counts plain = Run("kernels, memcpy, memset", {}, 60, 1);
  CHECK(plain.recorded == plain.refused_ambiguous && plain.in_place > 0,
        "every move in place but those parting an unnamed address's allocations (%d recorded again, %d such moves)",
        plain.recorded, plain.refused_ambiguous);

  // The same without a warm-up: Initialize records the first execution.
  Shape cold;
  cold.warmup = false;
  Counts no_warmup = Run("kernels, memcpy, memset, no warm-up", cold, 20, 5);
  CHECK(no_warmup.recorded_at_initialize == 1 && no_warmup.recorded == no_warmup.refused_ambiguous,
        "recorded at initialize %d, at execution %d (%d moves parting an unnamed address's allocations)",
        no_warmup.recorded_at_initialize, no_warmup.recorded, no_warmup.refused_ambiguous);

  // A kernel of another packing reads parameter 1 by its address: recorded while one array is
  // passed for both parameters (from the first execution on), the address lies in both
  // allocations, and a move that parts them must go down the recording path.
  Shape scan;
  scan.scan_param = true;
  scan.aliased_first = true;
  Counts by_address = Run("a parameter read by address", scan, 60, 6);
  CHECK(by_address.in_place > 0 && by_address.recorded > 0 && by_address.recorded == by_address.refused_ambiguous,
        "both paths taken, each refusal for an ambiguous address (%d in place, %d recorded again, %d such moves)",
        by_address.in_place, by_address.recorded, by_address.refused_ambiguous);

  // A nested command buffer as a child node: moves that only kernels see stay in place, and a
  // move the library refuses goes down XLA's recording path (UpdateChild).
  Shape child;
  child.child = true;
  child.scan_param = true;
  Counts with_child = Run("with a child command buffer", child, 40, 2);
  CHECK(with_child.in_place > 0 && with_child.recorded > 0, "both paths taken");

  // One array passed for two parameters, then two arrays, then the other one twice.
  AliasedParameters(true);
  AliasedParameters(false);

  // A traced command and a kernel with unknown argument sizes.
  Shape opaque;
  opaque.traced = true;
  opaque.params = true;
  Run("with a traced command and a kernelParams kernel", opaque, 16, 3);

  // A command that requires an update on every execution: XLA never moves in place, and
  // records that command (and those that use a moved allocation) again at every execution.
  Shape always;
  always.traced = true;
  always.update_on_execute = true;
  Counts every = Run("with a command updated at every execution", always, 16, 4);
  CHECK(every.move_calls == 0 && every.recorded == every.steps - 1,
        "MoveAllocations called %d times, %d of %d executions recorded", every.move_calls, every.recorded,
        every.steps - 1);

  // Commands that require an update on initialize (collectives): every Initialize records,
  // through the table kept pending by the finalized command buffer, so that ExecuteOnStream
  // finds nothing to update (XLA skips the command over persistent allocations only).
  Shape collective;
  collective.traced = true;
  collective.update_on_initialize = true;
  collective.warmup = false;
  Counts initialized = Run("with commands updated at initialize", collective, 20, 7);
  CHECK(initialized.move_calls == 0 && initialized.recorded == 0 &&
            initialized.recorded_at_initialize == initialized.steps,
        "MoveAllocations called %d times, recorded %d times at execution and %d of %d at initialize",
        initialized.move_calls, initialized.recorded, initialized.recorded_at_initialize, initialized.steps);

  if (device.cuda()) {
    Skipped("a step with nothing moved makes no setter call; a failing exec setter falls back to recording",
            "the software GPU's call counters and fault injection");
  } else {
    // A step in which nothing moved costs no runtime call; a failing exec setter sends the thunk
    // down the recording path, and the results are still right. Recorded as the bridge records,
    // the pointers named: given by address, those at parameter 0's end (parameter 1's base) may
    // come from either, and a move of parameter 0 alone would be refused before any setter runs.
    Program program({});
    Arena arena;
    auto r = std::make_unique<Recorded>();
    OK(rcb::CmdBuf::Create(0, &r->cb));
    std::vector<rcb_allocation> recorded_table = arena.Table();
    OK(r->cb.SetAllocations(recorded_table));
    program.RecordCreate(*r, arena, &recorded_table);
    OK(r->cb.Finalize());
    const char* setters[] = {"hipGraphExecKernelNodeSetParams", "hipGraphExecMemcpyNodeSetParams1D",
                             "hipGraphExecMemsetNodeSetParams", "hipGraphKernelNodeSetParams"};
    uint64_t before = 0, after = 0;
    for (const char* s : setters) before += device.CallCount(s);
    rcb_update_report report{};
    OK(r->cb.MoveAllocations({}, &report));
    rcb_allocation_move same = {kP0, arena.Address(kP0)};
    OK(r->cb.MoveAllocations({&same, 1}, &report));
    for (const char* s : setters) after += device.CallCount(s);
    CHECK(after == before && report.moved_allocations == 0, "a step with nothing moved made %llu setter calls",
          (unsigned long long)(after - before));

    std::mt19937 rng(4);
    for (uint64_t old = arena.Address(kP0); arena.Address(kP0) == old;) arena.Reallocate({kP0}, rng);
    CHECK(device.SetFaults("hipGraphExecKernelNodeSetParams:1"), "fault injection");
    rcb_allocation_move moved = {kP0, arena.Address(kP0)};
    OK(r->cb.MoveAllocations({&moved, 1}, &report));
    CHECK(report.needs_rerecord == 1, "a failing exec setter asks for a re-record");
    CHECK_CONTRACT(!r->cb.Launch(device.stream()).ok(), "launch refused while nodes are stale");
    device.SetFaults("");
    std::vector<rcb_allocation> table = arena.Table();
    OK(r->cb.BeginUpdate());  // the bridge's CheckCanBeUpdated: BeginUpdate, then the pending table
    OK(r->cb.SetAllocations(table));
    program.RecordUpdate(*r, arena, &table, {kP0}, /*is_initialization=*/false);
    OK(r->cb.Finalize());
    std::vector<uint8_t> before_launch = Before(arena, program, Inputs(99));
    std::vector<uint8_t> patched = Execute(r->cb, arena, before_launch);
    std::unique_ptr<Recorded> fresh = program.Create(arena);
    Differ("a fresh record's", "fault injection", 99, arena, patched, Execute(fresh->cb, arena, before_launch));
    std::printf("fault injection: the failed exec setter fell back to recording; results match\n");
  }

  return Finish("xla_flow");
}
