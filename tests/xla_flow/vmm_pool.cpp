// Replays, through include/rocm_cmdbuf.hpp, the executable loop of a patched XLA with
// --xla_gpu_rocm_cmdbuf_vmm_pool_slots (xla-patches/0007, RocmCmdbufVmmPool in
// xla/service/gpu/rocm_cmdbuf_vmm_pool.cc) on the software GPU or, with RCB_BACKEND=cuda, on an
// NVIDIA GPU. Per execution of GpuExecutable::ExecuteThunks:
//
//   * the caller's owning table: parameters at fresh addresses with new values every iteration,
//     fresh temporaries and live-out buffers (XLA's allocator), one constant global;
//   * the hook: acquire the pool's next slot; copy the pooled parameters into it on the stream;
//     an execution-only table with the pooled allocations at the slot's buffers;
//   * the thunks with that table: CommandBufferThunk (recorded once; at every slot change the
//     pooled allocations move: rcb_cmdbuf_move_allocations with
//     --xla_gpu_rocm_cmdbuf_update_in_place, XLA's update of the commands that use them without
//     it), then an ordinary thunk that reads a pooled live-out and writes a non-pooled one;
//   * the hook again: copy the live-outs back to the owning table's addresses, release the slot.
//
// The pool is made by the first execution (per device) over the command-buffer allocations that
// are neither constant nor persistent. Executions alternate between two streams, as two callers
// of one executable would, so stream order alone cannot keep a slot's uses apart; each command
// buffer starts with a slow kernel (rcb_test_sleep), so the host comes back to a slot while its
// previous use is still running. Checked: every live-out, at the caller's address, exactly equal
// to the host's result for that iteration's inputs; inputs unchanged; the host did reach slots
// still in flight, and acquire returned only after their release; the pool's memory given back
// (software GPU: live mappings, physical handles, reservations and allocations as before). A
// pool that cannot be made (fault injection) leaves XLA's ordinary path, with the same results.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"
#include "gpu.h"
#include "rocm_cmdbuf.hpp"

namespace {

constexpr uint64_t kN = 512;  // floats per allocation
constexpr uint64_t kBytes = kN * 4;
constexpr int kIterations = 20;
constexpr uint64_t kSleepUs = 10000;  // the slow kernel at the start of the command buffer

Gpu* gpu;
void* streams[2];  // two callers' streams

struct Kernels {
  void* sleep;
  void* add;
  void* axpy;
} k;

// The executable's buffer allocations, as XLA's BufferAssignment describes them.
enum : int { kX, kY, kW, kT, kOut, kC, kZ, kU, kR, kAllocs };
struct Allocation {
  const char* name;
  bool parameter;
  bool aliased_with_output;  // a donated parameter updated in place
  bool live_out;
  bool constant;
  bool command_buffer;  // used by a command buffer thunk
};
const Allocation kAllocations[kAllocs] = {
    {"x", true, false, false, false, true},     // parameter
    {"y", true, false, false, false, true},     // parameter
    {"w", true, true, true, false, true},       // parameter aliased with an output: w += 2 t
    {"t", false, false, false, false, true},    // temporary
    {"out", false, false, true, false, true},   // live-out
    {"c", false, false, false, true, true},     // constant (a global)
    {"z", true, false, true, false, true},      // parameter passed through to an output
    {"u", true, false, false, false, false},    // parameter of the ordinary thunk only
    {"r", false, false, true, false, false},    // live-out of the ordinary thunk only
};

// RocmCmdbufVmmPool's choice, for allocations that are not empty, thread-local or tuples and live
// in the default memory space: command-buffer allocations that are not constant and not
// persistent (the constants here, as GpuExecutableBufferAllocator passes them); entry parameters
// are copied in, live-outs that are not read-only parameters are copied out.
struct Pooled {
  int index;
  bool copy_in;
  bool copy_out;
};
std::vector<int> Persistent() {
  std::vector<int> persistent;
  for (int a = 0; a < kAllocs; ++a) {
    if (kAllocations[a].command_buffer && kAllocations[a].constant) persistent.push_back(a);
  }
  return persistent;
}
std::vector<Pooled> PoolPlan() {
  std::vector<Pooled> plan;
  std::vector<int> persistent = Persistent();
  for (int a = 0; a < kAllocs; ++a) {
    const Allocation& alloc = kAllocations[a];
    bool is_persistent = false;
    for (int p : persistent) is_persistent |= p == a;
    if (!alloc.command_buffer || alloc.constant || is_persistent) continue;
    bool read_only = (alloc.parameter && !alloc.aliased_with_output) || alloc.constant;
    plan.push_back({a, alloc.parameter, alloc.live_out && !read_only});
  }
  return plan;
}

// The command buffer's commands in a chain: the allocations each one uses.
const std::vector<std::vector<int>> kCommandUses = {
    {},              // sleep
    {kT, kX, kY},    // t = x + y
    {kOut, kT, kC},  // out = t + c
    {kOut, kZ},      // out = out + z
    {kW, kT},        // w += 2 t
};

rcb_kernel_launch Launch(void* f, const rcb_kernel_arg* args, size_t n) {
  return rcb_kernel_launch{sizeof(rcb_kernel_launch), f, {1, 1, 1}, {256, 1, 1}, 0, args, n};
}

// CommandBufferThunk with its command buffer (one per executor, shared by both streams).
struct CommandBuffer {
  bool in_place = false;  // --xla_gpu_rocm_cmdbuf_update_in_place
  rcb::CmdBuf cb;
  std::vector<rcb_node> nodes;
  std::vector<uint64_t> recorded;  // recorded_allocs: each allocation's address at the last record
  int in_place_moves = 0, updates = 0, moved_allocations = 0;

  // RecordCreate (update = false) or RecordUpdate of command `c` at the table's addresses, with
  // the argument kinds the bridge derives from KernelArgsPackedArray.
  void Record(size_t c, const std::vector<uint64_t>& table, bool update) {
    uint64_t n = kN, us = kSleepUs, a = 0, b = 0, out = 0;
    float two = 2.0f;
    std::vector<rcb_kernel_arg> args;
    void* f = k.add;
    if (c == 0) {
      f = k.sleep;
      args = {{&us, 8, RCB_ARG_VALUE}};
    } else if (c == 4) {
      f = k.axpy;
      out = table[kW];
      a = table[kT];
      args = {{&out, 8, RCB_ARG_DEVICE_PTR}, {&a, 8, RCB_ARG_DEVICE_PTR}, {&two, 4, RCB_ARG_VALUE},
              {&n, 8, RCB_ARG_VALUE}};
    } else {
      out = table[kCommandUses[c][0]];
      a = table[kCommandUses[c][c == 3 ? 0 : 1]];
      b = table[kCommandUses[c][c == 3 ? 1 : 2]];
      args = {{&out, 8, RCB_ARG_DEVICE_PTR}, {&a, 8, RCB_ARG_DEVICE_PTR}, {&b, 8, RCB_ARG_DEVICE_PTR},
              {&n, 8, RCB_ARG_VALUE}};
    }
    rcb_kernel_launch launch = Launch(f, args.data(), args.size());
    if (update) {
      OK(cb.UpdateKernel(nodes[c], launch));
    } else {
      std::vector<rcb_node> deps;
      if (c > 0) deps.push_back(nodes[c - 1]);
      OK(cb.AddKernel(deps, launch, &nodes[c]));
    }
  }

  // SetCommandBufferAllocations: the whole table (with update in place only).
  void SetAllocations(const std::vector<uint64_t>& table) {
    std::vector<rcb_allocation> allocs;
    for (uint64_t address : table) allocs.push_back({address, kBytes});
    OK(cb.SetAllocations(allocs));
  }

  // CommandBufferThunk::ExecuteOnStream with the execution's table.
  void Execute(const std::vector<uint64_t>& table, void* stream) {
    if (nodes.empty()) {  // the first record (Initialize)
      OK(rcb::CmdBuf::Create(0, &cb));
      if (in_place) SetAllocations(table);
      nodes.resize(kCommandUses.size());
      for (size_t c = 0; c < kCommandUses.size(); ++c) Record(c, table, false);
      OK(cb.Finalize());
      recorded = table;
    } else {
      // UpdateBufferAllocations over the command buffer's non-persistent allocations.
      std::vector<int> moved;
      std::vector<int> persistent = Persistent();
      for (int a = 0; a < kAllocs; ++a) {
        bool is_persistent = false;
        for (int p : persistent) is_persistent |= p == a;
        if (kAllocations[a].command_buffer && !is_persistent && recorded[a] != table[a]) {
          moved.push_back(a);
          recorded[a] = table[a];
        }
      }
      bool needs_update = !moved.empty();
      if (in_place && needs_update) {  // MoveCommandBufferAllocations
        std::vector<rcb_allocation_move> moves;
        for (int a : moved) moves.push_back({static_cast<uint64_t>(a), table[a]});
        rcb_update_report report{};
        OK(cb.MoveAllocations(moves, &report));
        CHECK(report.needs_rerecord == 0, "a move of kernel arguments only was refused");
        if (report.needs_rerecord == 0) {
          ++in_place_moves;
          moved_allocations += static_cast<int>(report.moved_allocations);
          needs_update = false;
        } else {
          SetAllocations(table);
        }
      }
      if (needs_update) {  // GpuCommandBuffer::Update: the commands that use a moved allocation
        ++updates;
        OK(cb.BeginUpdate());
        for (size_t c = 0; c < kCommandUses.size(); ++c) {
          bool touched = false;
          for (int a : kCommandUses[c]) {
            for (int m : moved) touched |= a == m;
          }
          if (touched) Record(c, table, true);
        }
        OK(cb.Finalize());
      }
    }
    OK(cb.Launch(stream));
  }
};

// The caller's side of one iteration: its owning table and the values it wrote.
struct Step {
  std::vector<uint64_t> owning;  // by allocation index
  std::vector<float> x, y, w, z, u;
};

float Value(int seed, uint64_t i, int mod, int offset) {
  return static_cast<float>(static_cast<int>((i * static_cast<uint64_t>(seed) + offset) % mod) - mod / 2);
}

std::vector<float> Read(uint64_t address) {
  std::vector<float> v(kN);
  gpu->Read(v.data(), address, kBytes);
  return v;
}

bool Same(const std::vector<float>& a, const std::vector<float>& b) {
  return std::memcmp(a.data(), b.data(), kBytes) == 0;
}

struct Result {
  int waited = 0;  // acquires that found the slot's previous use still running
  int exact = 0;   // iterations whose live-outs were all exact
};

// One run of the loop. `pool_fault`: the pool's creation is made to fail (software GPU), and the
// executable runs without it, as the hook does.
Result Run(const char* name, uint32_t backing, uint32_t slots, bool in_place, const char* pool_fault) {
  // The constant global, and every iteration's caller buffers, made and written before the loop
  // (a synchronous write would wait for the streams).
  std::vector<float> c(kN);
  for (uint64_t i = 0; i < kN; ++i) c[i] = static_cast<float>(i % 4);
  uint64_t global = gpu->Malloc(kBytes);
  gpu->Write(global, c.data(), kBytes);
  std::vector<Step> steps(kIterations);
  for (int it = 0; it < kIterations; ++it) {
    Step& s = steps[it];
    s.owning.resize(kAllocs);
    for (int a = 0; a < kAllocs; ++a) s.owning[a] = a == kC ? global : gpu->Malloc(kBytes);
    s.x.resize(kN), s.y.resize(kN), s.w.resize(kN), s.z.resize(kN), s.u.resize(kN);
    for (uint64_t i = 0; i < kN; ++i) {
      s.x[i] = Value(7, i, 13, it);
      s.y[i] = Value(5, i, 11, 3 * it);
      s.w[i] = Value(3, i, 9, it + 1);
      s.z[i] = Value(1, i, 5, it);
      s.u[i] = Value(2, i, 7, 2 * it);
    }
    gpu->Write(s.owning[kX], s.x.data(), kBytes);
    gpu->Write(s.owning[kY], s.y.data(), kBytes);
    gpu->Write(s.owning[kW], s.w.data(), kBytes);
    gpu->Write(s.owning[kZ], s.z.data(), kBytes);
    gpu->Write(s.owning[kU], s.u.data(), kBytes);
  }

  const char* kinds[] = {"mapping", "physical", "reservation", "alloc"};
  uint64_t live_before[4];
  for (int i = 0; i < 4; ++i) live_before[i] = gpu->LiveCount(kinds[i]);

  const std::vector<Pooled> plan = PoolPlan();
  rcb::VmmPool pool;
  bool pooled = false;
  CommandBuffer command_buffer;
  command_buffer.in_place = in_place;
  Result result;

  for (int it = 0; it < kIterations; ++it) {
    const Step& s = steps[it];
    void* stream = streams[it % 2];
    std::vector<uint64_t> table = s.owning;
    rcb_vmm_slot slot{};

    if (it == 0) {  // PoolFor: the first execution on the device makes the pool
      std::vector<uint64_t> sizes(plan.size(), kBytes);
      // VMM memory is mapped for every other visible device (the library skips those that
      // cannot access device 0).
      std::vector<int32_t> peers;
      for (int d = 1; backing == RCB_VMM_BACKING_VMM && d < gpu->DeviceCount() && peers.size() < 64; ++d) {
        peers.push_back(d);
      }
      rcb_vmm_pool_config config{};
      config.device = 0;
      config.backing = backing;
      config.num_slots = slots;
      config.num_buffers = static_cast<uint32_t>(sizes.size());
      config.buffer_sizes = sizes.data();
      config.num_peers = static_cast<uint32_t>(peers.size());
      config.peers = peers.empty() ? nullptr : peers.data();
      if (pool_fault != nullptr) CHECK(gpu->SetFaults(pool_fault), "fault injection");
      rcb::Status made = rcb::VmmPool::Create(config, &pool);
      gpu->SetFaults("");
      pooled = made.ok();
      CHECK(pooled == (pool_fault == nullptr), "%s: pool creation: %s", name, made.ToString().c_str());
    }

    if (pooled) {
      uint64_t before = 0;
      const uint32_t index = static_cast<uint32_t>(it) % slots;
      OK(pool.Timeline(index, &before));
      const uint64_t awaited = static_cast<uint64_t>(it) >= slots ? static_cast<uint64_t>(it) - slots + 1 : 0;
      if (before < awaited) ++result.waited;
      // 0007 takes the slot in stream order: the stream, not the host, waits for the slot's
      // previous use (the exact results below prove the wait).
      OK(pool.AcquireOnStream(stream, &slot));
      CHECK_CONTRACT(slot.iteration == static_cast<uint64_t>(it) && slot.index == index, "%s: iteration %d got %llu/%u",
            name, it, static_cast<unsigned long long>(slot.iteration), slot.index);

      std::vector<rcb_vmm_copy> in;
      for (size_t b = 0; b < plan.size(); ++b) {
        if (plan[b].copy_in) in.push_back({slot.buffers[b], s.owning[plan[b].index], kBytes});
        table[plan[b].index] = slot.buffers[b];
      }
      OK(pool.Copy(stream, in));
    }

    // ExecuteThunksImpl with the execution's table.
    command_buffer.Execute(table, stream);
    uint64_t r = table[kR], u = table[kU], out = table[kOut], n = kN;
    void* params[] = {&r, &u, &out, &n};
    gpu->Launch(k.add, 1, 256, params, stream);

    if (pooled) {
      std::vector<rcb_vmm_copy> back;
      for (size_t b = 0; b < plan.size(); ++b) {
        if (plan[b].copy_out) back.push_back({s.owning[plan[b].index], slot.buffers[b], kBytes});
      }
      OK(pool.Copy(stream, back));
      OK(pool.Release(slot, stream));
    }
  }
  gpu->Sync(streams[0]);
  gpu->Sync(streams[1]);

  for (int it = 0; it < kIterations; ++it) {
    const Step& s = steps[it];
    std::vector<float> want_out(kN), want_w(kN), want_r(kN);
    for (uint64_t i = 0; i < kN; ++i) {
      float t = s.x[i] + s.y[i];
      want_out[i] = t + c[i] + s.z[i];
      want_w[i] = s.w[i] + 2.0f * t;
      want_r[i] = s.u[i] + want_out[i];
    }
    bool out_ok = Same(Read(s.owning[kOut]), want_out);
    bool w_ok = Same(Read(s.owning[kW]), want_w);
    bool r_ok = Same(Read(s.owning[kR]), want_r);
    bool inputs_ok = Same(Read(s.owning[kX]), s.x) && Same(Read(s.owning[kY]), s.y) &&
                     Same(Read(s.owning[kZ]), s.z) && Same(Read(s.owning[kU]), s.u);
    CHECK_RESULT(out_ok && w_ok && r_ok, "%s: iteration %d: live-outs at the caller's addresses: out %s, w %s, r %s",
          name, it, out_ok ? "exact" : "WRONG", w_ok ? "exact" : "WRONG", r_ok ? "exact" : "WRONG");
    CHECK_RESULT(inputs_ok, "%s: iteration %d: a read-only parameter changed", name, it);
    if (out_ok && w_ok && r_ok) ++result.exact;
  }

  if (pooled) OK(pool.Free());
  OK(command_buffer.cb.Free());
  if (gpu->cuda()) Skipped("every mapping, physical handle, reservation and allocation freed", "the software GPU's live objects");
  for (int i = 0; i < 4 && !gpu->cuda(); ++i) {
    uint64_t now = gpu->LiveCount(kinds[i]);
    CHECK(now == live_before[i], "%s: live %s objects %llu after the pool's free, %llu before", name, kinds[i],
          static_cast<unsigned long long>(now), static_cast<unsigned long long>(live_before[i]));
  }
  for (const Step& s : steps) {
    for (int a = 0; a < kAllocs; ++a) {
      if (a != kC) gpu->Free(s.owning[a]);
    }
  }
  gpu->Free(global);

  std::printf("%s: %d iterations exact; %d acquires waited for a slot in flight; %d moves in place (%d "
              "allocations), %d updates\n",
              name, result.exact, result.waited, command_buffer.in_place_moves, command_buffer.moved_allocations,
              command_buffer.updates);
  const int pooled_count = static_cast<int>(plan.size());
  if (pooled && slots > 1) {
    // Every iteration after the first runs in another slot than the one before.
    CHECK(result.waited > 0, "%s: the host never reached a slot still in flight: nothing was tested", name);
    if (in_place) {
      CHECK(command_buffer.in_place_moves == kIterations - 1 && command_buffer.updates == 0 &&
                command_buffer.moved_allocations == (kIterations - 1) * pooled_count,
            "%s: every slot change is a move in place of the %d pooled allocations", name, pooled_count);
    } else {
      CHECK(command_buffer.updates == kIterations - 1, "%s: every slot change is an update", name);
    }
  } else if (pooled) {
    // One slot: the addresses never change after the first record.
    CHECK(command_buffer.in_place_moves == 0 && command_buffer.updates == 0,
          "%s: a single slot moved nothing", name);
  } else {
    // Without the pool the caller's fresh addresses move the command buffer every iteration.
    CHECK(command_buffer.in_place_moves + command_buffer.updates == kIterations - 1,
          "%s: every iteration moved the caller's fresh addresses", name);
  }
  return result;
}

}  // namespace

int main() {
  Gpu device;
  gpu = &device;
  Announce("xla_flow vmm_pool");
  k = {device.Function("rcb_test_sleep"), device.Function("rcb_test_add_f32"), device.Function("rcb_test_axpy_f32")};
  streams[0] = device.stream();
  streams[1] = device.NewStream();
  {
    // The process's first command buffer settles the update budget, whose probe keeps a 128-byte
    // buffer for the process: settled here, before the runs count the live objects they give back.
    rcb::CmdBuf first;
    OK(rcb::CmdBuf::Create(0, &first));
  }

  Run("3 VMM slots, moves in place", RCB_VMM_BACKING_VMM, 3, true, nullptr);
  Run("3 VMM slots, updates", RCB_VMM_BACKING_VMM, 3, false, nullptr);
  Run("3 device slots, moves in place", RCB_VMM_BACKING_DEVICE, 3, true, nullptr);
  Run("3 device slots, updates", RCB_VMM_BACKING_DEVICE, 3, false, nullptr);
  Run("1 VMM slot, moves in place", RCB_VMM_BACKING_VMM, 1, true, nullptr);

  if (device.cuda()) {
    Skipped("no pool (hipMemCreate fails): the executable runs on the caller's table",
            "the software GPU's fault injection");
  } else {
    // The pool cannot be made: the hook logs it and the executable runs on the caller's table.
    Run("no pool (hipMemCreate fails)", RCB_VMM_BACKING_VMM, 3, true, "hipMemCreate:1");
  }

  return Finish("xla_flow vmm_pool");
}
