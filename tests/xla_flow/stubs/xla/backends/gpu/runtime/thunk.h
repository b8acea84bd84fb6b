// Stand-in for XLA's xla/backends/gpu/runtime/thunk.h: a thunk's kind (the kinds the trace cache's
// hooks name) and whether it is a collective, and the two execution parameters those hooks read.
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_H_

#include "xla/service/gpu/buffer_allocations.h"
#include "xla/stream_executor/stream.h"

namespace xla::gpu {

class Thunk {
 public:
  enum Kind {
    kCollectiveKernel,
    kCommand,
    kConvolution,
    kCublasLtMatmul,
    kCuDnn,
    kCustomCall,
    kGemm,
    kKernel,
  };

  struct ExecuteParams {
    const BufferAllocations* buffer_allocations = nullptr;
    se::Stream* command_buffer_trace_stream = nullptr;
  };

  explicit Thunk(Kind kind) : kind_(kind) {}
  virtual ~Thunk() = default;
  Kind kind() const { return kind_; }
  virtual bool IsCollective() const { return false; }

 private:
  Kind kind_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_H_
