// The C++ wrapper include/rocm_cmdbuf.hpp end to end on the software GPU: what is recorded
// through it computes the right results, moves and updates report the right counts, a failing
// call's rcb::Status carries the code and the library's whole message, the RAII owners free each
// handle exactly once, and Span hands the right (pointer, count) to the C functions.
//
// Build: C++17 against include/ and Debian's HIP headers (-D__HIP_PLATFORM_AMD__), linked with
// -lrocm_cmdbuf and hipsim's libamdhip64.so; plain under -Wall -Wextra -Werror -pedantic with
// -fno-exceptions -fno-rtti, and with ASan+UBSan (see run.sh).
// Usage: hpp_wrapper MODE
//   flow          RCB_BACKEND=hip RCB_HIP_LIBRARY=<the hipsim file the program loaded>: every
//                 scenario below
//   long-message  the program sets RCB_BACKEND to 6000 bytes of "abé" before the library reads
//                 it: the failing LoadRuntime's Status holds the library's message whole
// Exits 0 when every check holds, 1 otherwise (each failed check prints file:line and the
// condition); a failing HIP call or a setup call that must succeed stops the program.
#include "rocm_cmdbuf.hpp"

#include "sim.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

// A wrapper call the test needs: stop on failure, printing Status::ToString.
#define MUST(call)                                                                              \
  do {                                                                                          \
    rcb::Status s_ = (call);                                                                    \
    if (!s_.ok()) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_.ToString().c_str()); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

// A Status that must be `code` with a message containing `needle`, and print as
// "<NAME>: <message>".
#define EXPECT_STATUS(status_expr, want_code, want_name, needle)                                         \
  do {                                                                                                   \
    rcb::Status st_ = (status_expr);                                                                     \
    CHECK(st_.code() == (want_code) && st_.message().find(needle) != std::string::npos &&               \
              st_.ToString() == std::string(want_name) + ": " + st_.message(),                           \
          "got '%s'; expected %s with '%s'", st_.ToString().c_str(), want_name, needle);                 \
  } while (0)

void free_all(std::initializer_list<void*> bufs) {
  for (void* p : bufs) HIP(hipFree(p));
}

// The allocation table of `bufs`, each BYTES long.
std::vector<rcb_allocation> table_of(std::initializer_list<void*> bufs) {
  std::vector<rcb_allocation> table;
  for (void* p : bufs) table.push_back(rcb_allocation{dptr(p), BYTES});
  return table;
}

// A kernel's arguments, owned: up to four 8-byte slots, each passed with its size and kind.
// launch() points the rcb_kernel_arg array at this object's slots, so call it on the object
// that lives through the C call.
struct Args {
  std::array<uint64_t, 4> values{};
  std::array<uint32_t, 4> sizes{}, kinds{};
  size_t count = 0;
  std::array<rcb_kernel_arg, 4> args{};

  void push(uint64_t value, uint32_t size, uint32_t kind) {
    values[count] = value;
    sizes[count] = size;
    kinds[count] = kind;
    count++;
  }
  rcb_kernel_launch launch(hipFunction_t f) {
    for (size_t i = 0; i < count; i++) args[i] = rcb_kernel_arg{&values[i], sizes[i], kinds[i]};
    // struct_size left 0: the wrapper sets it.
    rcb_kernel_launch l = {0, reinterpret_cast<void*>(f), {1, 1, 1}, {static_cast<uint32_t>(N), 1, 1}, 0, args.data(),
                           count};
    return l;
  }
};

// rcb_test_fill_u32(dst, value, n)
Args fill_args(const void* dst, uint32_t value) {
  Args a;
  a.push(dptr(dst), 8, RCB_ARG_DEVICE_PTR);
  a.push(value, 4, RCB_ARG_VALUE);
  a.push(N, 8, RCB_ARG_VALUE);
  return a;
}

// rcb_test_axpy_f32(y, x, a, n): y += a * x
Args axpy_args(const void* y, const void* x, float factor) {
  Args a;
  a.push(dptr(y), 8, RCB_ARG_DEVICE_PTR);
  a.push(dptr(x), 8, RCB_ARG_DEVICE_PTR);
  a.push(f32_bits(factor), 4, RCB_ARG_VALUE);
  a.push(N, 8, RCB_ARG_VALUE);
  return a;
}

// rcb_test_add_f32(out, a, b, n): out = a + b
Args add_args(const void* out, const void* x, const void* y) {
  Args a;
  a.push(dptr(out), 8, RCB_ARG_DEVICE_PTR);
  a.push(dptr(x), 8, RCB_ARG_DEVICE_PTR);
  a.push(dptr(y), 8, RCB_ARG_DEVICE_PTR);
  a.push(N, 8, RCB_ARG_VALUE);
  return a;
}

rcb_node add_kernel(rcb::CmdBuf& cb, rcb::Span<const rcb_node> deps, hipFunction_t f, Args a) {
  rcb_node node = 0;
  MUST(cb.AddKernel(deps, a.launch(f), &node));
  return node;
}

size_t node_count(rcb::CmdBuf& cb) {
  size_t n = 0;
  MUST(cb.NodeCount(&n));
  return n;
}

size_t site_count(rcb::CmdBuf& cb) {
  size_t n = 0;
  MUST(cb.SiteCount(&n));
  return n;
}

void launch_and_wait(rcb::CmdBuf& cb) {
  MUST(cb.Launch(gpu.stream));
  sync_stream();
}

size_t edge_count(void* graph) {
  size_t edges = 0;
  HIP(hipGraphGetEdges(static_cast<hipGraph_t>(graph), nullptr, nullptr, &edges));
  return edges;
}

// A report of 0xAB bytes, its struct_size too: the wrapper sets it.
rcb_update_report blank_report() {
  rcb_update_report r;
  std::memset(&r, 0xAB, sizeof r);
  return r;
}

// The report of an update in place; struct_size is the bytes the library wrote, all of them.
bool report_is(const rcb_update_report& r, uint32_t moved, uint64_t patched, uint64_t updated) {
  return r.struct_size == sizeof r && r.moved_allocations == moved && r.patched_sites == patched &&
         r.updated_nodes == updated && r.needs_rerecord == 0;
}

#define REPORT_ARGS(r)                                                                                \
  (r).moved_allocations, (unsigned long long)(r).patched_sites, (unsigned long long)(r).updated_nodes, \
      (r).needs_rerecord

rcb_counters counters_of(const rcb_cmdbuf* cb) {
  rcb_counters c;
  std::memset(&c, 0, sizeof c);
  MUST(rcb::CountersGet(cb, &c));
  return c;
}

// SetExecUpdateBudget, ExecUpdateBudget, CountersGet, CountersReset, FallbackReasonName: with a
// budget of one byte every move re-instantiates instead of pushing, the results stay right, and
// the counters say so per command buffer and in the process totals.
void budget_and_counters() {
  const rcb_counters before = counters_of(nullptr);
  void* x = upload_f32(0);
  void* x2 = upload_f32(0);
  rcb::CmdBuf cb;
  MUST(rcb::CmdBuf::Create(0, &cb));
  MUST(cb.SetExecUpdateBudget(1));
  MUST(cb.SetAllocations(table_of({x})));
  add_kernel(cb, {}, gpu.fill, fill_args(x, 3));
  MUST(cb.Finalize());
  uint64_t budget = 0, spent = 7;
  MUST(cb.ExecUpdateBudget(&budget, &spent));
  CHECK(budget == 1 && spent == 0, "budget %llu, spent %llu", (unsigned long long)budget, (unsigned long long)spent);
  EXPECT_STATUS(cb.SetExecUpdateBudget(0), RCB_STATUS_INVALID_STATE, "RCB_STATUS_INVALID_STATE", "before the first finalize");
  launch_and_wait(cb);
  const std::vector<rcb_allocation_move> moves = {rcb_allocation_move{0, dptr(x2)}};
  rcb_update_report report = blank_report();
  MUST(cb.MoveAllocations(moves, &report));
  CHECK(report_is(report, 1, 1, 1) && report.reinstantiated == 1, "moved %u, patched %llu, updated %llu, rerecord %u, reinstantiated %u",
        REPORT_ARGS(report), report.reinstantiated);
  launch_and_wait(cb);
  CHECK(holds_u32(x2, 3), "x2 after the re-instantiation%s", mismatch);
  report = blank_report();
  MUST(cb.UpdateAllocations({}, &report));
  CHECK(report.needs_rerecord == 1 && report.reinstantiated == 0, "a table of another shape: rerecord %u",
        report.needs_rerecord);

  const rcb_counters c = counters_of(cb.get());
  CHECK(c.version == RCB_COUNTERS_VERSION && c.struct_size == sizeof c, "version %u, size %u", c.version,
        c.struct_size);
  CHECK(c.instantiations == 2 && c.reinstantiations == 1 && c.retired_execs == 1 && c.exec_param_pushes == 0 &&
            c.address_updates == 1 && c.captures == 0,
        "instantiations %llu, reinstantiations %llu, retired %llu, pushes %llu, address updates %llu",
        (unsigned long long)c.instantiations, (unsigned long long)c.reinstantiations,
        (unsigned long long)c.retired_execs, (unsigned long long)c.exec_param_pushes,
        (unsigned long long)c.address_updates);
  CHECK(c.fallbacks_total == 1 && c.fallbacks[RCB_FALLBACK_SHAPE_CHANGED] == 1, "fallbacks %llu",
        (unsigned long long)c.fallbacks_total);
  CHECK(std::strcmp(rcb::FallbackReasonName(RCB_FALLBACK_SHAPE_CHANGED), "shape_changed") == 0 &&
            rcb::FallbackReasonName(RCB_FALLBACK_REASON_SLOTS) == nullptr,
        "reason names");
  const rcb_counters after = counters_of(nullptr);
  CHECK(after.instantiations - before.instantiations == 2 && after.reinstantiations - before.reinstantiations == 1,
        "process totals: +%llu instantiations",
        (unsigned long long)(after.instantiations - before.instantiations));
  MUST(rcb::CountersReset(cb.get()));
  CHECK(counters_of(cb.get()).instantiations == 0 && counters_of(nullptr).instantiations == after.instantiations,
        "a command buffer's reset leaves the totals");
  MUST(cb.Free());
  free_all({x, x2});
}

// ---------------------------------------------------------------------------------------------

size_t span_size(rcb::Span<const rcb_node> s) { return s.size(); }
uint64_t span_sum(rcb::Span<const rcb_node> s) {
  uint64_t sum = 0;
  for (rcb_node n : s) sum += n;
  return sum;
}

// Every Span constructor hands the C function the right pointer and count.
void span_constructors() {
  std::vector<rcb_node> v = {1, 2, 3};
  rcb::Span<const rcb_node> from_vector(v);
  CHECK(from_vector.data() == v.data() && from_vector.size() == 3, "vector: %p/%zu", (const void*)from_vector.data(),
        from_vector.size());
  const std::vector<rcb_node>& cv = v;
  rcb::Span<const rcb_node> from_const_vector(cv);
  CHECK(from_const_vector.data() == v.data() && from_const_vector.size() == 3, "const vector");
  rcb::Span<rcb_node> mutable_span(v);
  mutable_span[1] = 20;
  CHECK(v[1] == 20 && mutable_span.data() == v.data(), "a Span<T> of a vector writes through: v[1] = %llu",
        (unsigned long long)v[1]);
  rcb::Span<const rcb_node> widened(mutable_span);
  CHECK(widened.data() == v.data() && widened.size() == 3, "Span<const T> from Span<T>");
  std::vector<rcb_node> empty_vector;
  CHECK(rcb::Span<const rcb_node>(empty_vector).size() == 0 && rcb::Span<const rcb_node>(empty_vector).empty(),
        "empty vector");

  std::array<rcb_allocation, 2> arr = {{{0x1000, 16}, {0x2000, 32}}};
  rcb::Span<const rcb_allocation> from_array(arr);
  CHECK(from_array.data() == arr.data() && from_array.size() == 2 && from_array[1].size == 32, "std::array");
  const std::array<rcb_allocation, 2>& carr = arr;
  CHECK(rcb::Span<const rcb_allocation>(carr).data() == arr.data(), "const std::array");

  rcb_kernel_arg c_array[4] = {};
  rcb::Span<const rcb_kernel_arg> from_c_array(c_array);
  CHECK(from_c_array.data() == c_array && from_c_array.size() == 4, "C array: %zu", from_c_array.size());
  rcb::Span<const rcb_kernel_arg> from_pointer(c_array + 1, 2);
  CHECK(from_pointer.data() == c_array + 1 && from_pointer.size() == 2 && from_pointer.end() == c_array + 3,
        "pointer + count");

  rcb::Span<const rcb_node> empty;
  CHECK(empty.data() == nullptr && empty.size() == 0 && empty.empty(), "default Span");
  CHECK(span_size({}) == 0, "{} is the empty Span, not a list of one zero");
  CHECK(span_size({7}) == 1 && span_sum({7}) == 7, "a braced list of one");
  CHECK(span_size({5, 6, 7}) == 3 && span_sum({5, 6, 7}) == 18, "a braced list of three");
  CHECK(span_sum(v) == 1 + 20 + 3, "iteration over a vector's Span: %llu", (unsigned long long)span_sum(v));
}

// Status itself: the success value, and the "<NAME>: <message>" form for every code.
void status_basics() {
  rcb::Status ok;
  CHECK(ok.ok() && ok.code() == RCB_OK && ok.message().empty() && ok.ToString() == "RCB_OK", "default: '%s'",
        ok.ToString().c_str());
  const char* names[] = {"RCB_STATUS_NULL_ARGUMENT", "RCB_STATUS_INVALID_ARGUMENT", "RCB_STATUS_INVALID_HANDLE",
                         "RCB_STATUS_INVALID_STATE", "RCB_STATUS_FOREIGN_NODE", "RCB_STATUS_OUT_OF_MEMORY",
                         "RCB_STATUS_RUNTIME_UNAVAILABLE", "RCB_STATUS_NO_DEVICE", "RCB_STATUS_UNSUPPORTED",
                         "RCB_STATUS_RUNTIME_ERROR", "RCB_STATUS_TIMEOUT", "RCB_STATUS_CONFIG",
                         "RCB_STATUS_CALLBACK_FAILED", "RCB_STATUS_PANIC"};
  for (rcb_status code = RCB_STATUS_NULL_ARGUMENT; code <= RCB_STATUS_PANIC; code++) {
    rcb::Status s(code, "why");
    std::string want = std::string(names[code - 1]) + ": why";
    CHECK(!s.ok() && s.code() == code && s.ToString() == want, "code %d: '%s', want '%s'", (int)code,
          s.ToString().c_str(), want.c_str());
    CHECK(std::strcmp(rcb::StatusStr(code), rcb_status_str(code)) == 0, "StatusStr(%d)", (int)code);
  }
  CHECK(rcb::Status(9999, "m").ToString() == "rcb_status 9999: m", "unknown code: '%s'",
        rcb::Status(9999, "m").ToString().c_str());
  CHECK(rcb::Status(RCB_STATUS_TIMEOUT, "").ToString() == "RCB_STATUS_TIMEOUT", "empty message: '%s'",
        rcb::Status(RCB_STATUS_TIMEOUT, "").ToString().c_str());
}

// LoadRuntime and Version.
void runtime_and_version() {
  rcb_runtime_info info;
  std::memset(&info, 0, sizeof info);
  MUST(rcb::LoadRuntime(&info));
  const char* path = std::getenv("RCB_HIP_LIBRARY");
  CHECK(info.backend == RCB_BACKEND_HIP && info.device_count == 2 && path != nullptr &&
            std::strcmp(info.library, path) == 0,
        "backend %d, %d devices, library '%s'", (int)info.backend, (int)info.device_count, info.library);
  EXPECT_STATUS(rcb::LoadRuntime(nullptr), RCB_STATUS_NULL_ARGUMENT, "RCB_STATUS_NULL_ARGUMENT", "`out`");
  std::string want = std::to_string(RCB_VERSION_MAJOR) + "." + std::to_string(RCB_VERSION_MINOR) + "." +
                     std::to_string(RCB_VERSION_PATCH);
  CHECK(want == rcb::Version(), "Version() '%s', header says %s", rcb::Version(), want.c_str());
}

// 1. Record through the wrapper: fill(x = 2) -> axpy(y += 3x) -> memcpy(out <- y), memset(z = 5)
// beside them, an empty join of both branches; launch; MoveAllocations of x and out;
// UpdateAllocations of y; then BeginUpdate + Update* of every node type; each step launched and
// checked in device memory.
void kernels_and_moves() {
  void *x = upload_f32(0), *y = upload_f32(1), *out = upload_f32(0), *z = upload_f32(0);
  std::vector<rcb_allocation> table = table_of({x, y, out, z});

  rcb::CmdBuf cb;
  MUST(rcb::CmdBuf::Create(0, &cb));
  MUST(cb.SetAllocations(table));
  rcb_node fill = add_kernel(cb, {}, gpu.fill, fill_args(x, f32_bits(2)));
  rcb_node axpy = add_kernel(cb, {fill}, gpu.axpy, axpy_args(y, x, 3));
  rcb_node memset_z = 0, copy = 0, join = 0;
  MUST(cb.AddMemset({}, dptr(z), 5, 4, N, &memset_z));
  MUST(cb.AddMemcpyD2D({axpy}, dptr(out), dptr(y), BYTES, &copy));
  MUST(cb.AddEmpty({copy, memset_z}, &join));
  CHECK(node_count(cb) == 5, "%zu nodes", node_count(cb));
  // fill: x; axpy: y, x; memset: z; memcpy: out, y.
  CHECK(site_count(cb) == 6, "%zu sites", site_count(cb));
  MUST(cb.Finalize());
  rcb_memory_use kept{};  // struct_size 0: the wrapper sets it.
  MUST(cb.MemoryUse(&kept));
  // fill (pointer, u32, u64) packs to 24 bytes, axpy (two pointers, float, u64) to 32.
  CHECK(kept.struct_size == sizeof kept && kept.argument_bytes == 24 + 32 && kept.total_bytes > kept.argument_bytes,
        "memory use: struct_size %u, argument bytes %llu, total %llu", static_cast<unsigned>(kept.struct_size),
        static_cast<unsigned long long>(kept.argument_bytes), static_cast<unsigned long long>(kept.total_bytes));
  void *graph = nullptr, *exec = nullptr;
  MUST(cb.Graph(&graph));
  MUST(cb.Exec(&exec));
  CHECK(graph != nullptr && exec != nullptr, "graph %p, exec %p", graph, exec);
  // fill->axpy, axpy->copy, copy->join, memset->join: the braced deps reached the C calls.
  CHECK(edge_count(graph) == 4, "%zu edges", edge_count(graph));

  launch_and_wait(cb);
  CHECK(holds_f32(x, 2), "x%s", mismatch);
  CHECK(holds_f32(y, 7), "y = 1 + 3 * 2: y%s", mismatch);
  CHECK(holds_f32(out, 7), "out%s", mismatch);
  CHECK(holds_u32(z, 5), "z%s", mismatch);

  // The allocator moved x (0) and out (2), named in any order.
  void *x2 = upload_f32(0), *out2 = upload_f32(0);
  HIP(hipMemset(x, 0, BYTES));
  std::vector<rcb_allocation_move> moves = {{2, dptr(out2)}, {0, dptr(x2)}};
  rcb_update_report report = blank_report();
  MUST(cb.MoveAllocations(moves, &report));
  CHECK(report_is(report, 2, 3, 3), "moved %u, patched %llu, updated %llu, rerecord %u (want 2, 3, 3, 0)",
        REPORT_ARGS(report));
  launch_and_wait(cb);
  CHECK(holds_f32(x2, 2), "x2%s", mismatch);
  CHECK(holds_f32(y, 13), "y = 7 + 3 * 2: y%s", mismatch);
  CHECK(holds_f32(out2, 13), "out2%s", mismatch);
  CHECK(holds_f32(x, 0) && holds_f32(out, 7), "an old buffer was written after the move:%s", mismatch);

  // The whole table again, with y moved.
  void* y2 = upload_f32(100);
  table = table_of({x2, y2, out2, z});
  report = blank_report();
  MUST(cb.UpdateAllocations(table, &report));
  CHECK(report_is(report, 1, 2, 2), "moved %u, patched %llu, updated %llu, rerecord %u (want 1, 2, 2, 0)",
        REPORT_ARGS(report));
  launch_and_wait(cb);
  CHECK(holds_f32(y2, 106) && holds_f32(out2, 106), "y2 = 100 + 3 * 2:%s", mismatch);
  CHECK(holds_f32(y, 13), "old y written after the update: y%s", mismatch);

  // Re-record each node with new parameters.
  MUST(cb.BeginUpdate());
  Args f4 = fill_args(x2, f32_bits(4));
  MUST(cb.UpdateKernel(fill, f4.launch(gpu.fill)));
  MUST(cb.UpdateMemset(memset_z, dptr(z), 6, 4, N));
  MUST(cb.UpdateMemcpyD2D(copy, dptr(out), dptr(y2), BYTES));
  MUST(cb.Finalize());
  launch_and_wait(cb);
  CHECK(holds_f32(x2, 4), "updated fill: x2%s", mismatch);
  CHECK(holds_f32(y2, 118), "y2 = 106 + 3 * 4: y2%s", mismatch);
  CHECK(holds_f32(out, 118), "updated memcpy destination: out%s", mismatch);
  CHECK(holds_u32(z, 6), "updated memset: z%s", mismatch);

  MUST(cb.Free());
  CHECK(cb.get() == nullptr, "Free left the handle");
  free_all({x, y, out, z, x2, out2, y2});
}

// 2. Children: a nested command buffer cloned (AddChild), flattened (AddFlattenedChild of the
// command buffer, then of its raw graph) and swapped (UpdateChild); and a stream capture.
void children_and_capture() {
  void *a = upload_f32(0), *b = upload_f32(1), *e = upload_f32(0);
  std::vector<rcb_allocation> table = table_of({a, b, e});

  rcb::CmdBuf child;
  MUST(rcb::CmdBuf::CreateNested(0, &child));
  MUST(child.SetAllocations(table));
  add_kernel(child, {}, gpu.fill, fill_args(a, f32_bits(3)));
  MUST(child.Finalize());
  void* exec = nullptr;
  EXPECT_STATUS(child.Exec(&exec), RCB_STATUS_INVALID_STATE, "RCB_STATUS_INVALID_STATE", "nested");
  CHECK(exec == nullptr, "exec written on failure");

  // Cloned child, then e = a + b after it.
  rcb::CmdBuf parent;
  MUST(rcb::CmdBuf::Create(0, &parent));
  rcb_node child_node = 0;
  MUST(parent.AddChild({}, child, &child_node));
  add_kernel(parent, {child_node}, gpu.add, add_args(e, a, b));
  MUST(parent.Finalize());
  launch_and_wait(parent);
  CHECK(holds_f32(a, 3) && holds_f32(e, 4), "child then e = 3 + 1:%s", mismatch);

  // Swap the child node's graph for one that fills 5.
  rcb::CmdBuf child5;
  MUST(rcb::CmdBuf::CreateNested(0, &child5));
  add_kernel(child5, {}, gpu.fill, fill_args(a, f32_bits(5)));
  MUST(child5.Finalize());
  MUST(parent.BeginUpdate());
  MUST(parent.UpdateChild(child_node, child5));
  MUST(parent.Finalize());
  launch_and_wait(parent);
  CHECK(holds_f32(a, 5) && holds_f32(e, 6), "updated child then e = 5 + 1:%s", mismatch);

  // Flattened from the command buffer: its fill becomes a node of `flat` with its site.
  rcb::CmdBuf flat;
  MUST(rcb::CmdBuf::Create(0, &flat));
  MUST(flat.SetAllocations(table));
  rcb_node group = 0;
  rcb_flatten_report fr;
  std::memset(&fr, 0xAB, sizeof fr);
  MUST(flat.AddFlattenedChild({}, &child, nullptr, &group, &fr));
  CHECK(fr.flattened == 1 && fr.nodes == 1 && fr.sites == 1 && fr.reason[0] == '\0',
        "flattened %u, nodes %u, sites %u (want 1, 1, 1)", fr.flattened, fr.nodes, fr.sites);
  add_kernel(flat, {group}, gpu.add, add_args(e, a, b));
  CHECK(site_count(flat) == 4, "%zu sites (fill a; add e, a, b)", site_count(flat));
  MUST(flat.Finalize());
  void* a2 = upload_f32(0);
  rcb_allocation_move move_a = {0, dptr(a2)};
  rcb_update_report report = blank_report();
  MUST(flat.MoveAllocations(rcb::Span<const rcb_allocation_move>(&move_a, 1), &report));
  CHECK(report_is(report, 1, 2, 2), "moved %u, patched %llu, updated %llu, rerecord %u (want 1, 2, 2, 0)",
        REPORT_ARGS(report));
  HIP(hipMemset(a, 0, BYTES));
  launch_and_wait(flat);
  CHECK(holds_f32(a2, 3) && holds_f32(e, 4), "the flattened fill followed a:%s", mismatch);
  CHECK(holds_f32(a, 0), "old a written: a%s", mismatch);

  // The child's raw graph: cloned (AddChildGraph) and flattened by scanning (graph argument).
  void* raw = nullptr;
  MUST(child.Graph(&raw));
  rcb::CmdBuf from_raw;
  MUST(rcb::CmdBuf::Create(0, &from_raw));
  MUST(from_raw.SetAllocations(table));
  rcb_node cloned = 0, flat_group = 0;
  MUST(from_raw.AddChildGraph({}, raw, &cloned));
  std::memset(&fr, 0xAB, sizeof fr);
  MUST(from_raw.AddFlattenedChild({cloned}, nullptr, raw, &flat_group, &fr));
  CHECK(fr.flattened == 1 && fr.nodes == 1 && fr.sites == 1, "raw graph: flattened %u, nodes %u, sites %u",
        fr.flattened, fr.nodes, fr.sites);
  CHECK(node_count(from_raw) == 2 && site_count(from_raw) == 1, "%zu nodes, %zu sites (the clone has none)",
        node_count(from_raw), site_count(from_raw));
  EXPECT_STATUS(from_raw.AddFlattenedChild({}, &child, raw, &flat_group, &fr), RCB_STATUS_INVALID_ARGUMENT,
                "RCB_STATUS_INVALID_ARGUMENT", "both set");
  MUST(from_raw.Finalize());
  HIP(hipMemset(a, 0, BYTES));
  launch_and_wait(from_raw);
  CHECK(holds_f32(a, 3), "a%s", mismatch);

  // A capture becomes the command buffer's graph.
  rcb::CmdBuf captured;
  MUST(rcb::CmdBuf::Create(0, &captured));
  MUST(captured.CaptureBegin(gpu.stream));
  fill_packed pf = fill_of(b, f32_bits(9));
  HIP(launch_extra(gpu.fill, &pf, sizeof pf, gpu.stream));
  MUST(captured.CaptureEnd());
  MUST(captured.Finalize());
  CHECK(node_count(captured) == 0, "captured nodes counted: %zu", node_count(captured));
  launch_and_wait(captured);
  CHECK(holds_f32(b, 9), "captured fill: b%s", mismatch);

  free_all({a, b, e, a2});
}

// A trace function: fill(x = 3) on the capturing stream.
struct TraceWork {
  void* x;
  unsigned calls;
};

int32_t trace_fill(void* user_data, void* stream) {
  TraceWork* w = static_cast<TraceWork*>(user_data);
  w->calls++;
  fill_packed pf = fill_of(w->x, f32_bits(3));
  return launch_extra(gpu.fill, &pf, sizeof pf, static_cast<hipStream_t>(stream)) == hipSuccess ? 0 : -1;
}

void run_graph(void* g) {
  hipGraphExec_t exec;
  HIP(hipGraphInstantiate(&exec, static_cast<hipGraph_t>(g), nullptr, nullptr, 0));
  HIP(hipGraphLaunch(exec, gpu.stream));
  sync_stream();
  HIP(hipGraphExecDestroy(exec));
}

// 3. TraceCache: traced, then a hit on the same graph; a moved-to owner frees the cache's graphs
// once.
void trace_cache() {
  void* x = upload_f32(0);
  std::vector<rcb_allocation> key = table_of({x});
  TraceWork w = {x, 0};
  uint64_t graphs = hipsimLiveCount("graph");
  {
    rcb::TraceCache tc;
    MUST(rcb::TraceCache::Create(4, &tc));
    void* g1 = nullptr;
    uint32_t outcome = 99;
    MUST(tc.GetOrTrace(gpu.stream, key, trace_fill, &w, &g1, &outcome));
    CHECK(outcome == RCB_TRACE_TRACED && w.calls == 1 && g1 != nullptr, "outcome %u, %u calls", outcome, w.calls);
    CHECK(holds_f32(x, 0), "captured, not run: x%s", mismatch);
    run_graph(g1);
    CHECK(holds_f32(x, 3), "x%s", mismatch);
    void* g2 = nullptr;
    MUST(tc.GetOrTrace(gpu.stream, key, trace_fill, &w, &g2, &outcome));
    CHECK(outcome == RCB_TRACE_HIT && g2 == g1 && w.calls == 1, "outcome %u, same graph %d, %u calls", outcome,
          g2 == g1, w.calls);
    CHECK(hipsimLiveCount("graph") > graphs, "the cache holds no graph");

    rcb_trace_cache* raw = tc.get();
    rcb::TraceCache moved(std::move(tc));
    CHECK(tc.get() == nullptr && !tc && moved.get() == raw, "moved-from cache %p, moved-to %p", (void*)tc.get(),
          (void*)moved.get());
    EXPECT_STATUS(tc.GetOrTrace(gpu.stream, key, trace_fill, &w, &g2, &outcome), RCB_STATUS_NULL_ARGUMENT,
                  "RCB_STATUS_NULL_ARGUMENT", "`tc`");
    EXPECT_STATUS(rcb::TraceCache::Create(0, &tc), RCB_STATUS_INVALID_ARGUMENT, "RCB_STATUS_INVALID_ARGUMENT",
                  "capacity");
    CHECK(tc.get() == nullptr, "a failed Create wrote its output");
  }
  CHECK(hipsimLiveCount("graph") == graphs, "the cache's graphs outlived both owners: %llu more",
        (unsigned long long)(hipsimLiveCount("graph") - graphs));
  free_all({x});
}

// 4. Ownership: a moved-from CmdBuf is empty and frees nothing; a handle is freed exactly once
// whatever path releases it; Free, release and adopting keep to the C rules.
void ownership() {
  const uint64_t graphs = hipsimLiveCount("graph");
  rcb_cmdbuf* raw = nullptr;
  {
    rcb::CmdBuf a;
    MUST(rcb::CmdBuf::Create(0, &a));
    raw = a.get();
    CHECK(raw != nullptr && hipsimLiveCount("graph") == graphs + 1, "one graph per command buffer");
    rcb::CmdBuf b(std::move(a));
    CHECK(a.get() == nullptr && !a && b.get() == raw, "move construction: a %p, b %p", (void*)a.get(),
          (void*)b.get());
    {
      rcb::CmdBuf c;
      c = std::move(b);
      CHECK(b.get() == nullptr && c.get() == raw, "move assignment");
    }
    CHECK(hipsimLiveCount("graph") == graphs, "c's destructor did not free the command buffer");
    size_t n = 0;
    CHECK(rcb_cmdbuf_node_count(raw, &n) == RCB_STATUS_INVALID_HANDLE, "the handle is still live");
    // a and b are empty: their destructors (and Free) must not touch anything.
    MUST(a.Free());
    MUST(b.Free());
  }
  CHECK(hipsimLiveCount("graph") == graphs, "an empty owner's destructor changed the live graphs");
  // The handle was freed once: a second owner of the stale value gets INVALID_HANDLE, and then
  // lets go of it (the object is gone).
  rcb::CmdBuf stale(raw);
  EXPECT_STATUS(stale.Free(), RCB_STATUS_INVALID_HANDLE, "RCB_STATUS_INVALID_HANDLE", "not live");
  CHECK(stale.get() == nullptr, "Free kept a handle that is not live");

  // Assigning over a live owner frees its old handle; self-move keeps it.
  rcb::CmdBuf d, e;
  MUST(rcb::CmdBuf::Create(0, &d));
  MUST(rcb::CmdBuf::Create(0, &e));
  rcb_cmdbuf *raw_d = d.get(), *raw_e = e.get();
  d = std::move(e);
  size_t n = 0;
  CHECK(d.get() == raw_e && e.get() == nullptr && hipsimLiveCount("graph") == graphs + 1,
        "assignment over a live owner: %llu graphs", (unsigned long long)(hipsimLiveCount("graph") - graphs));
  CHECK(rcb_cmdbuf_node_count(raw_d, &n) == RCB_STATUS_INVALID_HANDLE, "d's old handle is still live");
  rcb::CmdBuf& same = d;
  d = std::move(same);
  CHECK(d.get() == raw_e, "self-move emptied the owner");
  MUST(d.NodeCount(&n));

  // Create into a live owner frees the old handle; a failing Create leaves *out as it was.
  MUST(rcb::CmdBuf::Create(0, &d));
  CHECK(d.get() != raw_e && rcb_cmdbuf_node_count(raw_e, &n) == RCB_STATUS_INVALID_HANDLE &&
            hipsimLiveCount("graph") == graphs + 1,
        "Create over a live owner");
  rcb_cmdbuf* raw_d2 = d.get();
  EXPECT_STATUS(rcb::CmdBuf::Create(0, nullptr), RCB_STATUS_NULL_ARGUMENT, "RCB_STATUS_NULL_ARGUMENT", "`out`");
  EXPECT_STATUS(rcb::CmdBuf::Create(99, &d), RCB_STATUS_INVALID_ARGUMENT, "RCB_STATUS_INVALID_ARGUMENT",
                "device 99 does not exist");
  CHECK(d.get() == raw_d2 && hipsimLiveCount("graph") == graphs + 1, "a failed Create changed its output");

  // release: the caller owns the handle, the owner's destructor leaves it alone.
  {
    rcb::CmdBuf f;
    MUST(rcb::CmdBuf::Create(0, &f));
    raw = f.release();
    CHECK(f.get() == nullptr && raw != nullptr, "release");
  }
  CHECK(rcb_cmdbuf_free(raw) == RCB_OK, "the released handle was freed by the owner: %s", last_error());

  // Free: returns the status and empties the owner; again is a no-op.
  MUST(d.Free());
  CHECK(d.get() == nullptr && hipsimLiveCount("graph") == graphs, "Free");
  MUST(d.Free());
}

// 5. Calls the library refuses: the Status has the code and the message the C call sets.
void bad_calls() {
  rcb::CmdBuf empty;
  EXPECT_STATUS(empty.Finalize(), RCB_STATUS_NULL_ARGUMENT, "RCB_STATUS_NULL_ARGUMENT", "`cb`");

  void* x = upload_f32(0);
  std::vector<rcb_allocation> table = table_of({x});
  rcb::CmdBuf cb, other;
  MUST(rcb::CmdBuf::Create(0, &cb));
  MUST(rcb::CmdBuf::Create(0, &other));
  EXPECT_STATUS(cb.SetAllocations(rcb::Span<const rcb_allocation>(nullptr, 1)), RCB_STATUS_NULL_ARGUMENT,
                "RCB_STATUS_NULL_ARGUMENT", "`allocs`");
  Args fa = fill_args(x, 1);
  EXPECT_STATUS(cb.AddKernel({}, fa.launch(gpu.fill), nullptr), RCB_STATUS_NULL_ARGUMENT,
                "RCB_STATUS_NULL_ARGUMENT", "`node`");
  MUST(cb.SetAllocations(table));
  rcb_node fill = add_kernel(cb, {}, gpu.fill, fill_args(x, 1));
  rcb_node foreign = add_kernel(other, {}, gpu.fill, fill_args(x, 1));
  rcb_update_report report = blank_report();
  EXPECT_STATUS(cb.UpdateAllocations(table, &report), RCB_STATUS_INVALID_STATE, "RCB_STATUS_INVALID_STATE",
                "recording");
  MUST(cb.Finalize());
  MUST(cb.BeginUpdate());
  EXPECT_STATUS(cb.UpdateKernel(foreign, fa.launch(gpu.fill)), RCB_STATUS_FOREIGN_NODE,
                "RCB_STATUS_FOREIGN_NODE", "belongs to command buffer");
  MUST(cb.UpdateKernel(fill, fa.launch(gpu.fill)));
  MUST(cb.Finalize());

  // The wrapper's message is the C call's message, whole.
  std::vector<rcb_allocation_move> moves = {{0, table[0].base}, {1, table[0].base}};
  rcb::Status moved = cb.MoveAllocations(moves, &report);
  CHECK(moved.code() == RCB_STATUS_INVALID_ARGUMENT &&
            moved.message().find("moves[1].index 1 is outside the table of 1 allocation(s)") != std::string::npos,
        "'%s'", moved.ToString().c_str());
  CHECK(report.moved_allocations == 0xABABABABu, "report written on failure");
  CHECK(rcb_cmdbuf_move_allocations(cb.get(), moves.data(), moves.size(), &report) == RCB_STATUS_INVALID_ARGUMENT,
        "the C call");
  std::string c_message = last_error();
  CHECK(moved.message() == c_message, "wrapper '%s', C '%s'", moved.message().c_str(), c_message.c_str());
  CHECK(moved.ToString() == "RCB_STATUS_INVALID_ARGUMENT: " + c_message, "'%s'", moved.ToString().c_str());

  // A Status keeps its own copy: a later success clears the thread's message, not the Status.
  rcb::Status after = cb.MoveAllocations(rcb::Span<const rcb_allocation_move>(moves.data(), 1), &report);
  CHECK(after.ok() && after.message().empty() && after.ToString() == "RCB_OK", "'%s'", after.ToString().c_str());
  CHECK(rcb_last_error_message(nullptr, 0) == 0, "success left a message");
  CHECK(moved.message() == c_message, "the earlier Status changed: '%s'", moved.message().c_str());
  CHECK(report_is(report, 0, 0, 0), "a move to the same base: moved %u, patched %llu, updated %llu, rerecord %u",
        REPORT_ARGS(report));
  free_all({x});
}

// 6. VmmPool: Create, Acquire, Copy (and a refused copy), Release, Timeline; Free refused while a
// slot is held keeps the pool, then frees it; a moved pool is freed once.
void vmm_pool() {
  const uint64_t mappings = hipsimLiveCount("mapping"), physical = hipsimLiveCount("physical");
  void* in = upload_f32(8);
  uint64_t sizes[1] = {BYTES};
  rcb_vmm_pool_config config;
  std::memset(&config, 0, sizeof config);
  config.device = 0;
  config.backing = RCB_VMM_BACKING_VMM;
  config.num_slots = 2;
  config.num_buffers = 1;
  config.buffer_sizes = sizes;
  rcb::VmmPool made;
  MUST(rcb::VmmPool::Create(config, &made));
  CHECK(hipsimLiveCount("mapping") == mappings + 2, "%llu mappings for 2 slots",
        (unsigned long long)(hipsimLiveCount("mapping") - mappings));
  rcb::VmmPool pool(std::move(made));
  CHECK(made.get() == nullptr && pool.get() != nullptr, "move");
  rcb_vmm_slot none;
  EXPECT_STATUS(made.Acquire(&none), RCB_STATUS_NULL_ARGUMENT, "RCB_STATUS_NULL_ARGUMENT", "`pool`");

  rcb_vmm_slot slot;
  MUST(pool.Acquire(&slot));
  CHECK(slot.iteration == 0 && slot.index == 0 && slot.num_buffers == 1 && slot.buffers[0] != 0,
        "slot: iteration %llu, index %u, %u buffers", (unsigned long long)slot.iteration, slot.index,
        slot.num_buffers);
  rcb_vmm_copy bad = {slot.buffers[0], dptr(in), BYTES + 4};
  EXPECT_STATUS(pool.Copy(gpu.stream, rcb::Span<const rcb_vmm_copy>(&bad, 1)), RCB_STATUS_INVALID_ARGUMENT,
                "RCB_STATUS_INVALID_ARGUMENT", "copies[0]");
  std::vector<rcb_vmm_copy> copies = {{slot.buffers[0], dptr(in), BYTES}};
  MUST(pool.Copy(gpu.stream, copies));

  rcb_vmm_pool* raw = pool.get();
  EXPECT_STATUS(pool.Free(), RCB_STATUS_INVALID_STATE, "RCB_STATUS_INVALID_STATE", "");
  CHECK(pool.get() == raw, "Free refused but the owner let go of the live pool");
  MUST(pool.Release(slot, gpu.stream));
  sync_stream();
  uint64_t timeline = 0;
  MUST(pool.Timeline(slot.index, &timeline));
  CHECK(timeline == slot.iteration + 1, "timeline %llu", (unsigned long long)timeline);
  void* slot_buffer = reinterpret_cast<void*>(static_cast<uintptr_t>(slot.buffers[0]));
  CHECK(holds_f32(slot_buffer, 8), "the copy into the slot: %s", mismatch);
  EXPECT_STATUS(pool.Release(slot, gpu.stream), RCB_STATUS_INVALID_STATE, "RCB_STATUS_INVALID_STATE", "");

  MUST(pool.Free());
  CHECK(pool.get() == nullptr, "Free kept the handle");
  CHECK(hipsimLiveCount("mapping") == mappings && hipsimLiveCount("physical") == physical,
        "the pool's memory outlived it");
  free_all({in});
}

// 7. The stream cache through the free functions.
void streams() {
  rcb_stream_stats s0, s1;
  MUST(rcb::StreamCacheTrim(-1));
  MUST(rcb::StreamCacheStats(-1, &s0));
  const uint64_t live = hipsimLiveCount("stream");
  void* stream = nullptr;
  MUST(rcb::StreamAcquire(0, 0, 0, &stream));
  MUST(rcb::StreamCacheStats(-1, &s1));
  CHECK(stream != nullptr && s1.misses == s0.misses + 1 && s1.in_use == s0.in_use + 1, "first acquire");
  MUST(rcb::StreamRelease(stream));
  MUST(rcb::StreamCacheStats(-1, &s1));
  CHECK(s1.kept == s0.kept + 1 && s1.in_use == s0.in_use, "kept %llu", (unsigned long long)s1.kept);
  void* again = nullptr;
  MUST(rcb::StreamAcquire(0, 0, 0, &again));
  MUST(rcb::StreamCacheStats(-1, &s1));
  CHECK(again == stream && s1.hits == s0.hits + 1, "the idle stream was not reused");
  // Synchronized, so known idle: given back without a hipStreamQuery, and reused.
  CHECK(hipStreamSynchronize(static_cast<hipStream_t>(again)) == hipSuccess, "hipStreamSynchronize");
  const uint64_t queries = hipsimGetCallCount("hipStreamQuery");
  MUST(rcb::StreamReleaseIdle(again));
  MUST(rcb::StreamCacheStats(-1, &s1));
  CHECK(s1.kept == s0.kept + 1 && hipsimGetCallCount("hipStreamQuery") == queries,
        "release idle: kept %llu, %llu queries", (unsigned long long)s1.kept,
        (unsigned long long)(hipsimGetCallCount("hipStreamQuery") - queries));
  MUST(rcb::StreamAcquire(0, 0, 0, &again));
  CHECK(again == stream, "the stream released idle was not reused");
  MUST(rcb::StreamRelease(again));
  EXPECT_STATUS(rcb::StreamRelease(again), RCB_STATUS_INVALID_HANDLE, "RCB_STATUS_INVALID_HANDLE", "");
  EXPECT_STATUS(rcb::StreamReleaseIdle(again), RCB_STATUS_INVALID_HANDLE, "RCB_STATUS_INVALID_HANDLE", "");
  EXPECT_STATUS(rcb::StreamRelease(nullptr), RCB_STATUS_NULL_ARGUMENT, "RCB_STATUS_NULL_ARGUMENT", "stream");
  EXPECT_STATUS(rcb::StreamReleaseIdle(nullptr), RCB_STATUS_NULL_ARGUMENT, "RCB_STATUS_NULL_ARGUMENT", "stream");
  MUST(rcb::StreamCacheTrim(-1));
  MUST(rcb::StreamCacheStats(-1, &s1));
  CHECK(s1.kept == 0 && s1.destroyed == s0.destroyed + 1 && hipsimLiveCount("stream") == live,
        "trim: kept %llu, destroyed %llu", (unsigned long long)s1.kept,
        (unsigned long long)(s1.destroyed - s0.destroyed));
  EXPECT_STATUS(rcb::StreamCacheTrim(-2), RCB_STATUS_INVALID_ARGUMENT, "RCB_STATUS_INVALID_ARGUMENT",
                "device -2");
  // Before a device reset: a stream acquired earlier is forgotten, its release refused untouched.
  void* forgotten = nullptr;
  MUST(rcb::StreamAcquire(0, 0, 0, &forgotten));
  MUST(rcb::StreamCacheReset(0));
  EXPECT_STATUS(rcb::StreamRelease(forgotten), RCB_STATUS_INVALID_HANDLE, "RCB_STATUS_INVALID_HANDLE",
                "rcb_stream_cache_reset");
  CHECK(hipStreamDestroy(static_cast<hipStream_t>(forgotten)) == hipSuccess,
        "the release after rcb_stream_cache_reset destroyed the stream");
}

// long-message mode: RCB_BACKEND set (before the library reads it) to a value of 6000 bytes with
// 2-byte characters; the failing LoadRuntime's Status holds all of the library's message.
void long_message() {
  std::string value;
  for (int i = 0; i < 1500; i++) value += "ab\xc3\xa9";  // "abé"
  CHECK(setenv("RCB_BACKEND", value.c_str(), 1) == 0, "setenv");
  rcb_runtime_info info;
  rcb::Status s = rcb::LoadRuntime(&info);
  const std::string want = "environment variable RCB_BACKEND is \"" + value + "\"; expected hip, cuda or auto";
  CHECK(s.code() == RCB_STATUS_CONFIG, "'%.200s'", s.ToString().c_str());
  CHECK(s.message() == want, "message of %zu bytes, want %zu: '%.60s'", s.message().size(), want.size(),
        s.message().c_str());
  CHECK(s.message().size() == rcb_last_error_message(nullptr, 0), "%zu bytes, the library has %zu",
        s.message().size(), rcb_last_error_message(nullptr, 0));
  CHECK(s.ToString() == "RCB_STATUS_CONFIG: " + want, "ToString of %zu bytes", s.ToString().size());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "long-message") {
    long_message();
  } else if (mode == "flow") {
    const live_objects before = live_now();
    gpu_open();

    span_constructors();
    status_basics();
    runtime_and_version();
    kernels_and_moves();
    budget_and_counters();
    children_and_capture();
    trace_cache();
    ownership();
    bad_calls();
    vmm_pool();
    streams();

    gpu_close();
    check_nothing_leaked(before);
  } else {
    std::fprintf(stderr, "usage: %s flow|long-message\n", argv[0]);
    return 2;
  }
  std::printf("hpp_wrapper %s: %s\n", mode.c_str(), failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
