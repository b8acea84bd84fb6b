// Stand-in for XLA's xla/backends/gpu/runtime/thunk_executor.h: the thunk sequence an executable
// runs and its buffer definition plan's type (see ../../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_EXECUTOR_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_EXECUTOR_H_

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "xla/backends/gpu/runtime/thunk.h"
#include "xla/service/buffer_assignment.h"

namespace xla::gpu {

class ThunkExecutor {
 public:
  using DefinitionPlan =
      absl::flat_hash_map<const Thunk*, std::vector<BufferAllocation::Index>>;

  explicit ThunkExecutor(ThunkSequence thunks) : thunks_(std::move(thunks)) {}

  const ThunkSequence& thunks() const { return thunks_; }

 private:
  ThunkSequence thunks_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_THUNK_EXECUTOR_H_
