// rocm_cmdbuf: header-only C++17 wrapper of the C ABI in rocm_cmdbuf.h, for XLA's bridge and any
// C++ program. Written by hand (rocm_cmdbuf.h is the generated one).
//
// It wraps, and adds no behaviour: every wrapper makes exactly one C call (the one named in the
// comment above it) with the same arguments, and turns its rcb_status into an rcb::Status. The
// one thing it does for the caller: it sets the struct_size of every sized struct it passes (the
// rule at the top of rocm_cmdbuf.h) to sizeof that struct as this header declares it, on a copy
// of an input and in place for an output, so C++ callers leave it alone.
// Ownership, lifetimes, thread-safety, which states allow a call, and what is written on failure
// are exactly those of that C function (read its comment in rocm_cmdbuf.h); in particular an
// output is written only on success. A wrapper object itself is a plain C++ value: do not move,
// assign or free it while another thread calls through it. The only additions are C++ forms of
// the same things: a Status object, a Span for (pointer, count) arguments, and RAII owners of the
// four handles.
//
// Naming convention (Google C++ style, as in XLA):
//   * a method or function is the C name in CamelCase, without `rcb_` and, for a method, without
//     its object's prefix:  rcb_cmdbuf_add_memcpy_d2d(cb, ...)  ->  cb.AddMemcpyD2D(...)
//                           rcb_vmm_pool_acquire(pool, ...)     ->  pool.Acquire(...)
//                           rcb_stream_cache_stats(...)         ->  rcb::StreamCacheStats(...)
//     with these exceptions: rcb_*_new -> static Create (rcb_cmdbuf_new_nested -> CreateNested),
//     rcb_*_free -> Free (and the destructor), rcb_runtime_load -> LoadRuntime,
//     rcb_status_str -> StatusStr;
//   * plain accessors are lower case, as in the standard library and Abseil: Status::ok(),
//     code(), message(); get() and release() of an owner; Span::data(), size(), empty().
//   * arguments keep the C order with the handle dropped; a (pointer, count) pair becomes one
//     Span; a required input struct is a const reference; an output stays a pointer (nullptr is
//     passed through, so the C function reports it as RCB_STATUS_NULL_ARGUMENT).
//   * adding a C function is one method of the form
//       Status NewThing(args) { return internal::Wrap(rcb_cmdbuf_new_thing(h_, args)); }
//     next to its neighbours (a new rcb_cmdbuf_add_* / rcb_cmdbuf_update_* pair: two methods
//     beside AddKernel / UpdateKernel). A new constant, such as another rcb_kernel_arg kind,
//     needs nothing here: the C structs and constants are used as they are.
//
// Status: every fallible wrapper returns an rcb::Status ([[nodiscard]]). On failure it holds the
// code and a copy of rcb_last_error_message, read on the calling thread right after the C call,
// before anything else can replace it. Nothing here throws or needs RTTI: it builds with
// -fno-exceptions -fno-rtti (the only possible failure is std::string's allocation, which then
// aborts, as anywhere else).
//
// Owners (CmdBuf, TraceCache, VmmPool, Correlator) are move-only. The destructor calls the matching *_free
// and ignores its status; Free() calls it and returns the status; release() gives the raw handle
// up without freeing it; get() returns it. A moved-from owner is empty (get() == nullptr) and its
// destructor calls *_free(NULL), a no-op; any other call on it passes NULL, which the C function
// reports as RCB_STATUS_NULL_ARGUMENT, as for a NULL handle of every type. Assigning to an owner
// (or Create into it) frees the handle it held first.

#ifndef ROCM_CMDBUF_HPP
#define ROCM_CMDBUF_HPP

#include "rocm_cmdbuf.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace rcb {

// rcb_status_str(code): a static description, "RCB_STATUS_<NAME>: <what it means>".
inline const char* StatusStr(rcb_status code) noexcept { return rcb_status_str(code); }

// The result of a call: RCB_OK (empty message), or a failure code and the library's message.
class [[nodiscard]] Status {
 public:
  // RCB_OK.
  Status() noexcept = default;
  Status(rcb_status code, std::string message) noexcept : code_(code), message_(std::move(message)) {}

  // `code` as returned by a C call just made on this thread: on failure, the message is copied
  // from rcb_last_error_message (first asked for its length with (NULL, 0), then copied whole).
  static Status FromLastCall(rcb_status code) {
    if (code == RCB_OK) return Status();
    const size_t length = rcb_last_error_message(nullptr, 0);
    std::string message(length + 1, '\0');
    const size_t copied = rcb_last_error_message(&message[0], message.size());
    // copied == length: everything fitted; otherwise (it cannot grow in between on this thread)
    // keep what was written, which is NUL-terminated.
    message.resize(copied <= length ? copied : std::strlen(message.c_str()));
    return Status(code, std::move(message));
  }

  bool ok() const noexcept { return code_ == RCB_OK; }
  rcb_status code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // "RCB_OK", or "<NAME>: <message>" where NAME is the part of rcb_status_str(code) before its
  // first ':' ("RCB_STATUS_INVALID_ARGUMENT: <message>"); an unknown code is named
  // "rcb_status <number>".
  std::string ToString() const {
    const char* text = rcb_status_str(code_);
    const char* colon = text != nullptr ? std::strchr(text, ':') : nullptr;
    std::string out = colon != nullptr ? std::string(text, static_cast<size_t>(colon - text))
                                       : "rcb_status " + std::to_string(code_);
    if (!message_.empty()) {
      out += ": ";
      out += message_;
    }
    return out;
  }

  // Explicitly discards the status (Status is [[nodiscard]]).
  void IgnoreError() const noexcept {}

 private:
  rcb_status code_ = RCB_OK;
  std::string message_;
};

// A borrowed array argument: a pointer and a count of elements, passed to the C function as its
// (pointer, count) pair. Owns nothing; the array must outlive the call. From an empty vector or
// the default constructor, data() may be nullptr (the C functions accept NULL with a count of 0).
// Span<const T> also converts from a braced list, e.g. cb.AddEmpty({a, b}, &join): the list lives
// until the end of the full expression, long enough for a call.
template <class T>
class Span {
  template <class U>
  using Compatible = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value, int>;

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  constexpr Span() noexcept = default;
  constexpr Span(T* data, size_t size) noexcept : data_(data), size_(size) {}
  template <class U, size_t N, Compatible<U> = 0>
  constexpr Span(U (&array)[N]) noexcept : data_(array), size_(N) {}
  template <class U, size_t N, Compatible<U> = 0>
  constexpr Span(std::array<U, N>& array) noexcept : data_(array.data()), size_(N) {}
  template <class U, size_t N, Compatible<const U> = 0>
  constexpr Span(const std::array<U, N>& array) noexcept : data_(array.data()), size_(N) {}
  template <class U, class A, Compatible<U> = 0>
  Span(std::vector<U, A>& vector) noexcept : data_(vector.data()), size_(vector.size()) {}
  template <class U, class A, Compatible<const U> = 0>
  Span(const std::vector<U, A>& vector) noexcept : data_(vector.data()), size_(vector.size()) {}
  template <class U, Compatible<U> = 0>
  constexpr Span(const Span<U>& other) noexcept : data_(other.data()), size_(other.size()) {}
  template <class U = T, std::enable_if_t<std::is_const<U>::value, int> = 0>
  constexpr Span(std::initializer_list<value_type> list) noexcept : Span(list.begin(), list.size()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr T& operator[](size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

namespace internal {

// The one conversion every wrapper uses: call the C function, then Wrap its status at once.
inline Status Wrap(rcb_status code) { return Status::FromLastCall(code); }

// An output sized struct with its struct_size set; nullptr is passed on as it is.
template <class T>
T* SetSize(T* out) noexcept {
  if (out != nullptr) out->struct_size = static_cast<uint32_t>(sizeof(T));
  return out;
}

// A copy of an input sized struct with its struct_size set.
template <class T>
T WithSize(const T& in) noexcept {
  T copy = in;
  copy.struct_size = static_cast<uint32_t>(sizeof(T));
  return copy;
}

// Move-only owner of a handle of type Raw, freed with FreeFn (rcb_*_free).
template <class Raw, rcb_status (*FreeFn)(Raw*)>
class Owner {
 public:
  Owner() noexcept = default;
  explicit Owner(Raw* adopt) noexcept : h_(adopt) {}
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  Owner(Owner&& other) noexcept : h_(other.h_) { other.h_ = nullptr; }
  // Frees the handle held (status ignored), then takes `other`'s.
  Owner& operator=(Owner&& other) noexcept {
    if (this != &other) {
      (void)FreeFn(h_);
      h_ = other.h_;
      other.h_ = nullptr;
    }
    return *this;
  }
  // FreeFn(handle), status ignored (FreeFn(NULL) is a no-op).
  ~Owner() { (void)FreeFn(h_); }

  // FreeFn(handle). The owner becomes empty when the object is gone: on RCB_OK, or
  // RCB_STATUS_INVALID_HANDLE (it was not live). Any other failure leaves the C object live
  // (e.g. rcb_vmm_pool_free while a slot is held), so the owner keeps it: call Free() again
  // later, or let the destructor try once more.
  Status Free() {
    const rcb_status code = FreeFn(h_);
    Status status = Wrap(code);
    if (code == RCB_OK || code == RCB_STATUS_INVALID_HANDLE) h_ = nullptr;
    return status;
  }

  // The raw handle, still owned (nullptr when empty).
  Raw* get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  // Gives up ownership without freeing: the caller frees the returned handle.
  Raw* release() noexcept {
    Raw* h = h_;
    h_ = nullptr;
    return h;
  }

 protected:
  Raw* h_ = nullptr;
};

}  // namespace internal

// rcb_runtime_load(out): loads the GPU runtime once per process and describes it.
inline Status LoadRuntime(rcb_runtime_info* out) { return internal::Wrap(rcb_runtime_load(internal::SetSize(out))); }

// rcb_version(): "MAJOR.MINOR.PATCH", static.
inline const char* Version() noexcept { return rcb_version(); }

// rcb_stream_acquire(device, flags, priority, stream): the caller owns *stream until
// StreamRelease or StreamReleaseIdle.
inline Status StreamAcquire(int32_t device, uint32_t flags, int32_t priority, void** stream) {
  return internal::Wrap(rcb_stream_acquire(device, flags, priority, stream));
}

// rcb_stream_release(stream).
inline Status StreamRelease(void* stream) { return internal::Wrap(rcb_stream_release(stream)); }

// rcb_stream_release_idle(stream): only for a stream synchronized successfully with nothing
// enqueued since (the promise is in rocm_cmdbuf.h).
inline Status StreamReleaseIdle(void* stream) { return internal::Wrap(rcb_stream_release_idle(stream)); }

// rcb_stream_cache_trim(device); -1 for every device.
inline Status StreamCacheTrim(int32_t device) { return internal::Wrap(rcb_stream_cache_trim(device)); }

// rcb_stream_cache_reset(device), right before a reset of the device; -1 for every device.
inline Status StreamCacheReset(int32_t device) { return internal::Wrap(rcb_stream_cache_reset(device)); }

// rcb_stream_cache_stats(device, stats); -1 sums every device.
inline Status StreamCacheStats(int32_t device, rcb_stream_stats* stats) {
  return internal::Wrap(rcb_stream_cache_stats(device, internal::SetSize(stats)));
}

// A command buffer (rcb_cmdbuf), freed with rcb_cmdbuf_free.
class CmdBuf : public internal::Owner<rcb_cmdbuf, rcb_cmdbuf_free> {
 public:
  CmdBuf() noexcept = default;
  // Takes ownership of a handle from rcb_cmdbuf_new*.
  explicit CmdBuf(rcb_cmdbuf* adopt) noexcept : Owner(adopt) {}

  // rcb_cmdbuf_new(device, &handle); on success *out owns the handle (a handle *out held before
  // is freed). A nullptr `out` is passed on as NULL.
  static Status Create(int32_t device, CmdBuf* out) {
    rcb_cmdbuf* raw = nullptr;
    Status status = internal::Wrap(rcb_cmdbuf_new(device, out != nullptr ? &raw : nullptr));
    if (status.ok()) *out = CmdBuf(raw);
    return status;
  }

  // rcb_cmdbuf_new_nested(device, &handle); as Create.
  static Status CreateNested(int32_t device, CmdBuf* out) {
    rcb_cmdbuf* raw = nullptr;
    Status status = internal::Wrap(rcb_cmdbuf_new_nested(device, out != nullptr ? &raw : nullptr));
    if (status.ok()) *out = CmdBuf(raw);
    return status;
  }

  // rcb_cmdbuf_set_allocations(cb, allocs.data(), allocs.size()).
  Status SetAllocations(Span<const rcb_allocation> allocs) {
    return internal::Wrap(rcb_cmdbuf_set_allocations(h_, allocs.data(), allocs.size()));
  }

  // rcb_cmdbuf_add_kernel(cb, deps.data(), deps.size(), &launch, node).
  Status AddKernel(Span<const rcb_node> deps, const rcb_kernel_launch& launch, rcb_node* node) {
    const rcb_kernel_launch sized = internal::WithSize(launch);
    return internal::Wrap(rcb_cmdbuf_add_kernel(h_, deps.data(), deps.size(), &sized, node));
  }

  // rcb_cmdbuf_add_kernel_params(cb, deps.data(), deps.size(), &launch, node).
  Status AddKernelParams(Span<const rcb_node> deps, const rcb_kernel_params_launch& launch, rcb_node* node) {
    const rcb_kernel_params_launch sized = internal::WithSize(launch);
    return internal::Wrap(rcb_cmdbuf_add_kernel_params(h_, deps.data(), deps.size(), &sized, node));
  }

  // rcb_cmdbuf_add_memcpy_d2d(cb, deps.data(), deps.size(), dst, src, bytes, node).
  Status AddMemcpyD2D(Span<const rcb_node> deps, uint64_t dst, uint64_t src, uint64_t bytes, rcb_node* node) {
    return internal::Wrap(rcb_cmdbuf_add_memcpy_d2d(h_, deps.data(), deps.size(), dst, src, bytes, node));
  }

  // rcb_cmdbuf_add_memset(cb, deps.data(), deps.size(), dst, pattern, element_size, count, node).
  Status AddMemset(Span<const rcb_node> deps, uint64_t dst, uint32_t pattern, uint32_t element_size, uint64_t count,
                   rcb_node* node) {
    return internal::Wrap(
        rcb_cmdbuf_add_memset(h_, deps.data(), deps.size(), dst, pattern, element_size, count, node));
  }

  // rcb_cmdbuf_add_empty(cb, deps.data(), deps.size(), node).
  Status AddEmpty(Span<const rcb_node> deps, rcb_node* node) {
    return internal::Wrap(rcb_cmdbuf_add_empty(h_, deps.data(), deps.size(), node));
  }

  // rcb_cmdbuf_add_child(cb, deps.data(), deps.size(), child.get(), node).
  Status AddChild(Span<const rcb_node> deps, const CmdBuf& child, rcb_node* node) {
    return internal::Wrap(rcb_cmdbuf_add_child(h_, deps.data(), deps.size(), child.get(), node));
  }

  // rcb_cmdbuf_add_child_graph(cb, deps.data(), deps.size(), graph, node); `graph` a hipGraph_t.
  Status AddChildGraph(Span<const rcb_node> deps, void* graph, rcb_node* node) {
    return internal::Wrap(rcb_cmdbuf_add_child_graph(h_, deps.data(), deps.size(), graph, node));
  }

  // rcb_cmdbuf_update_kernel(cb, node, &launch).
  Status UpdateKernel(rcb_node node, const rcb_kernel_launch& launch) {
    const rcb_kernel_launch sized = internal::WithSize(launch);
    return internal::Wrap(rcb_cmdbuf_update_kernel(h_, node, &sized));
  }

  // rcb_cmdbuf_update_kernel_params(cb, node, &launch).
  Status UpdateKernelParams(rcb_node node, const rcb_kernel_params_launch& launch) {
    const rcb_kernel_params_launch sized = internal::WithSize(launch);
    return internal::Wrap(rcb_cmdbuf_update_kernel_params(h_, node, &sized));
  }

  // rcb_cmdbuf_update_memcpy_d2d(cb, node, dst, src, bytes).
  Status UpdateMemcpyD2D(rcb_node node, uint64_t dst, uint64_t src, uint64_t bytes) {
    return internal::Wrap(rcb_cmdbuf_update_memcpy_d2d(h_, node, dst, src, bytes));
  }

  // rcb_cmdbuf_update_memset(cb, node, dst, pattern, element_size, count).
  Status UpdateMemset(rcb_node node, uint64_t dst, uint32_t pattern, uint32_t element_size, uint64_t count) {
    return internal::Wrap(rcb_cmdbuf_update_memset(h_, node, dst, pattern, element_size, count));
  }

  // rcb_cmdbuf_update_child(cb, node, child.get()).
  Status UpdateChild(rcb_node node, const CmdBuf& child) {
    return internal::Wrap(rcb_cmdbuf_update_child(h_, node, child.get()));
  }

  // rcb_cmdbuf_update_child_graph(cb, node, graph); `graph` a hipGraph_t.
  Status UpdateChildGraph(rcb_node node, void* graph) {
    return internal::Wrap(rcb_cmdbuf_update_child_graph(h_, node, graph));
  }

  // rcb_cmdbuf_capture_begin(cb, stream); `stream` a hipStream_t.
  Status CaptureBegin(void* stream) { return internal::Wrap(rcb_cmdbuf_capture_begin(h_, stream)); }

  // rcb_cmdbuf_capture_end(cb).
  Status CaptureEnd() { return internal::Wrap(rcb_cmdbuf_capture_end(h_)); }

  // rcb_cmdbuf_finalize(cb).
  Status Finalize() { return internal::Wrap(rcb_cmdbuf_finalize(h_)); }

  // rcb_cmdbuf_begin_update(cb).
  Status BeginUpdate() { return internal::Wrap(rcb_cmdbuf_begin_update(h_)); }

  // rcb_cmdbuf_launch(cb, stream); `stream` a hipStream_t, nullptr for the default stream.
  Status Launch(void* stream) { return internal::Wrap(rcb_cmdbuf_launch(h_, stream)); }

  // rcb_cmdbuf_launches_done(cb): every launch so far has finished (each stream synchronized).
  Status LaunchesDone() { return internal::Wrap(rcb_cmdbuf_launches_done(h_)); }

  // rcb_cmdbuf_graph(cb, graph): the hipGraph_t, borrowed from the command buffer.
  Status Graph(void** graph) { return internal::Wrap(rcb_cmdbuf_graph(h_, graph)); }

  // rcb_cmdbuf_exec(cb, exec): the hipGraphExec_t, borrowed from the command buffer.
  Status Exec(void** exec) { return internal::Wrap(rcb_cmdbuf_exec(h_, exec)); }

  // rcb_cmdbuf_update_allocations(cb, allocs.data(), allocs.size(), report).
  Status UpdateAllocations(Span<const rcb_allocation> allocs, rcb_update_report* report) {
    return internal::Wrap(rcb_cmdbuf_update_allocations(h_, allocs.data(), allocs.size(), internal::SetSize(report)));
  }

  // rcb_cmdbuf_move_allocations(cb, moves.data(), moves.size(), report).
  Status MoveAllocations(Span<const rcb_allocation_move> moves, rcb_update_report* report) {
    return internal::Wrap(rcb_cmdbuf_move_allocations(h_, moves.data(), moves.size(), internal::SetSize(report)));
  }

  // rcb_cmdbuf_set_exec_update_budget(cb, bytes).
  Status SetExecUpdateBudget(uint64_t bytes) { return internal::Wrap(rcb_cmdbuf_set_exec_update_budget(h_, bytes)); }

  // rcb_cmdbuf_exec_update_budget(cb, budget, spent).
  Status ExecUpdateBudget(uint64_t* budget, uint64_t* spent) {
    return internal::Wrap(rcb_cmdbuf_exec_update_budget(h_, budget, spent));
  }

  // rcb_cmdbuf_node_count(cb, count).
  Status NodeCount(size_t* count) { return internal::Wrap(rcb_cmdbuf_node_count(h_, count)); }

  // rcb_cmdbuf_site_count(cb, count).
  Status SiteCount(size_t* count) { return internal::Wrap(rcb_cmdbuf_site_count(h_, count)); }

  // rcb_cmdbuf_memory_use(cb, out).
  Status MemoryUse(rcb_memory_use* out) const { return internal::Wrap(rcb_cmdbuf_memory_use(h_, internal::SetSize(out))); }

  // rcb_cmdbuf_add_flattened_child(cb, deps.data(), deps.size(), child ? child->get() : NULL,
  // graph, group, report): exactly one of `child` (a finalized command buffer) and `graph` (a
  // hipGraph_t) is non-null.
  Status AddFlattenedChild(Span<const rcb_node> deps, const CmdBuf* child, void* graph, rcb_node* group,
                           rcb_flatten_report* report) {
    return internal::Wrap(rcb_cmdbuf_add_flattened_child(h_, deps.data(), deps.size(),
                                                         child != nullptr ? child->get() : nullptr, graph,
                                                         group, internal::SetSize(report)));
  }

  // rcb_cmdbuf_update_flattened_child(cb, group, child ? child->get() : NULL, graph, report):
  // exactly one of `child` and `graph` is non-null; `report` may be null.
  Status UpdateFlattenedChild(rcb_node group, const CmdBuf* child, void* graph, rcb_flatten_report* report) {
    return internal::Wrap(rcb_cmdbuf_update_flattened_child(h_, group, child != nullptr ? child->get() : nullptr,
                                                            graph, internal::SetSize(report)));
  }
};

// rcb_counters_get(cb, out): the counters of `cb`, or the process totals for nullptr.
inline Status CountersGet(const rcb_cmdbuf* cb, rcb_counters* out) {
  return internal::Wrap(rcb_counters_get(cb, internal::SetSize(out)));
}

// rcb_counters_reset(cb): zeroes the counters of `cb`, or the process totals for nullptr.
inline Status CountersReset(rcb_cmdbuf* cb) { return internal::Wrap(rcb_counters_reset(cb)); }

// rcb_fallback_reason_name(reason): a static name, nullptr for a number that is no reason.
inline const char* FallbackReasonName(uint32_t reason) noexcept { return rcb_fallback_reason_name(reason); }

// A trace cache (rcb_trace_cache), freed with rcb_trace_cache_free.
class TraceCache : public internal::Owner<rcb_trace_cache, rcb_trace_cache_free> {
 public:
  TraceCache() noexcept = default;
  // Takes ownership of a handle from rcb_trace_cache_new.
  explicit TraceCache(rcb_trace_cache* adopt) noexcept : Owner(adopt) {}

  // rcb_trace_cache_new(capacity, &handle); on success *out owns the handle (a handle *out held
  // before is freed). A nullptr `out` is passed on as NULL.
  static Status Create(size_t capacity, TraceCache* out) {
    rcb_trace_cache* raw = nullptr;
    Status status = internal::Wrap(rcb_trace_cache_new(capacity, out != nullptr ? &raw : nullptr));
    if (status.ok()) *out = TraceCache(raw);
    return status;
  }

  // rcb_trace_cache_get_or_trace(tc, stream, allocs.data(), allocs.size(), trace_fn, user_data,
  // graph, outcome): *graph is borrowed from the cache until its next call or free.
  Status GetOrTrace(void* stream, Span<const rcb_allocation> allocs, rcb_trace_fn trace_fn, void* user_data,
                    void** graph, uint32_t* outcome) {
    return internal::Wrap(
        rcb_trace_cache_get_or_trace(h_, stream, allocs.data(), allocs.size(), trace_fn, user_data, graph, outcome));
  }
};

// A circular VMM pool (rcb_vmm_pool), freed with rcb_vmm_pool_free (which waits for the GPU, and
// fails leaving the pool live while a slot is held: see Owner::Free).
class VmmPool : public internal::Owner<rcb_vmm_pool, rcb_vmm_pool_free> {
 public:
  VmmPool() noexcept = default;
  // Takes ownership of a handle from rcb_vmm_pool_new.
  explicit VmmPool(rcb_vmm_pool* adopt) noexcept : Owner(adopt) {}

  // rcb_vmm_pool_new(&config, &handle); on success *out owns the handle (a handle *out held
  // before is freed). A nullptr `out` is passed on as NULL.
  static Status Create(const rcb_vmm_pool_config& config, VmmPool* out) {
    rcb_vmm_pool* raw = nullptr;
    const rcb_vmm_pool_config sized = internal::WithSize(config);
    Status status = internal::Wrap(rcb_vmm_pool_new(&sized, out != nullptr ? &raw : nullptr));
    if (status.ok()) *out = VmmPool(raw);
    return status;
  }

  // rcb_vmm_pool_acquire_on_stream(pool, stream, slot); `stream` a hipStream_t.
  Status AcquireOnStream(void* stream, rcb_vmm_slot* slot) {
    return internal::Wrap(rcb_vmm_pool_acquire_on_stream(h_, stream, internal::SetSize(slot)));
  }

  // rcb_vmm_pool_acquire(pool, slot).
  Status Acquire(rcb_vmm_slot* slot) { return internal::Wrap(rcb_vmm_pool_acquire(h_, internal::SetSize(slot))); }

  // rcb_vmm_pool_release(pool, &slot, stream); `stream` a hipStream_t.
  Status Release(const rcb_vmm_slot& slot, void* stream) {
    const rcb_vmm_slot sized = internal::WithSize(slot);
    return internal::Wrap(rcb_vmm_pool_release(h_, &sized, stream));
  }

  // rcb_vmm_pool_copy(pool, stream, copies.data(), copies.size()).
  Status Copy(void* stream, Span<const rcb_vmm_copy> copies) {
    return internal::Wrap(rcb_vmm_pool_copy(h_, stream, copies.data(), copies.size()));
  }

  // rcb_vmm_pool_timeline(pool, slot, value).
  Status Timeline(uint32_t slot, uint64_t* value) { return internal::Wrap(rcb_vmm_pool_timeline(h_, slot, value)); }
};

// A profiler correlator (rcb_correlator), freed with rcb_correlator_free. The methods are const:
// they change nothing in the wrapper, so several threads may call AddApiEvent / AddActivity (and
// the others, as the C functions allow) through one Correlator at once.
class Correlator : public internal::Owner<rcb_correlator, rcb_correlator_free> {
 public:
  Correlator() noexcept = default;
  // Takes ownership of a handle from rcb_correlator_new.
  explicit Correlator(rcb_correlator* adopt) noexcept : Owner(adopt) {}

  // rcb_correlator_new(&config, &handle); on success *out owns the handle (a handle *out held
  // before is freed). A nullptr `out` is passed on as NULL.
  static Status Create(const rcb_correlator_config& config, Correlator* out) {
    rcb_correlator* raw = nullptr;
    const rcb_correlator_config sized = internal::WithSize(config);
    Status status = internal::Wrap(rcb_correlator_new(&sized, out != nullptr ? &raw : nullptr));
    if (status.ok()) *out = Correlator(raw);
    return status;
  }

  // rcb_correlator_add_api_event(c, &event).
  Status AddApiEvent(const rcb_api_event& event) const {
    return internal::Wrap(rcb_correlator_add_api_event(h_, &event));
  }

  // rcb_correlator_add_activity(c, &activity).
  Status AddActivity(const rcb_activity& activity) const {
    return internal::Wrap(rcb_correlator_add_activity(h_, &activity));
  }

  // rcb_correlator_add_api_events(c, events.data(), events.size()).
  Status AddApiEvents(Span<const rcb_api_event> events) const {
    return internal::Wrap(rcb_correlator_add_api_events(h_, events.data(), events.size()));
  }

  // rcb_correlator_add_activities(c, activities.data(), activities.size()).
  Status AddActivities(Span<const rcb_activity> activities) const {
    return internal::Wrap(rcb_correlator_add_activities(h_, activities.data(), activities.size()));
  }

  // rcb_correlator_exchange(c, &sink, summary): the records the callbacks receive are valid only
  // during each call.
  Status Exchange(const rcb_correlator_sink& sink, rcb_correlator_summary* summary) const {
    const rcb_correlator_sink sized = internal::WithSize(sink);
    return internal::Wrap(rcb_correlator_exchange(h_, &sized, internal::SetSize(summary)));
  }

  // rcb_correlator_clear(c).
  Status Clear() const { return internal::Wrap(rcb_correlator_clear(h_)); }

  // rcb_correlator_trim(c).
  Status Trim() const { return internal::Wrap(rcb_correlator_trim(h_)); }

  // rcb_correlator_stats(c, counters).
  Status Stats(rcb_correlator_counters* counters) const {
    return internal::Wrap(rcb_correlator_stats(h_, internal::SetSize(counters)));
  }
};

}  // namespace rcb

#endif  // ROCM_CMDBUF_HPP
