// Stand-in for XLA's xla/backends/gpu/runtime/thunk.h: a thunk's kind (the kinds the trace cache's
// hooks name) and whether it is a collective, the two execution parameters those hooks read, its
// ThunkInfo, Walk, and a ThunkSequence walked as the VMM pool walks it (a thunk nests none here).
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "xla/service/gpu/buffer_allocations.h"
#include "xla/stream_executor/stream.h"

namespace xla::gpu {

class Thunk {
 public:
  enum Kind {
    kAllGather,
    kAllReduce,
    kAllToAll,
    kCollectiveBroadcast,
    kCollectiveKernel,
    kCollectivePermute,
    kCommand,
    kCommandBuffer,
    kConvolution,
    kCublasLtMatmul,
    kCuDnn,
    kCustomCall,
    kDynamicSliceFusion,
    kGemm,
    kGroup,
    kKernel,
    kRaggedAllToAll,
    kRecv,
    kReduceScatter,
    kSend,
  };

  struct ExecuteParams {
    const BufferAllocations* buffer_allocations = nullptr;
    se::Stream* command_buffer_trace_stream = nullptr;
  };

  struct ThunkInfo {};

  using ConstWalker = absl::FunctionRef<absl::Status(const Thunk*)>;

  explicit Thunk(Kind kind) : kind_(kind) {}
  Thunk(Kind kind, ThunkInfo) : kind_(kind) {}
  virtual ~Thunk() = default;
  Kind kind() const { return kind_; }
  // Not virtual in XLA: a switch on the kind (thunk.cc), so a test command cannot override it.
  bool IsCollective() const {
    switch (kind_) {
      case kAllGather:
      case kAllReduce:
      case kAllToAll:
      case kCollectiveBroadcast:
      case kCollectivePermute:
      case kGroup:
      case kRaggedAllToAll:
      case kRecv:
      case kReduceScatter:
      case kSend:
        return true;
      default:
        return false;
    }
  }

  // Calls `callback` on this thunk and every thunk nested in it (none here), as XLA's Walk does
  // with a callback returning void; a command hides Thunk::Walk behind its own, as in XLA.
  template <typename F>
  void Walk(F&& callback) {
    callback(this);
  }
  template <typename F>
  void Walk(F&& callback) const {
    callback(this);
  }

  virtual absl::Status WalkNested(ConstWalker pre_order, ConstWalker post_order) const {
    absl::Status status = pre_order(this);
    return status.ok() ? post_order(this) : status;
  }

 private:
  Kind kind_;
};

class ThunkSequence : public std::vector<std::unique_ptr<Thunk>> {
 public:
  ThunkSequence() = default;

  absl::Status WalkNested(Thunk::ConstWalker callback) const {
    for (const std::unique_ptr<Thunk>& thunk : *this) {
      absl::Status status =
          thunk->WalkNested(callback, [](const Thunk*) { return absl::OkStatus(); });
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_H_
