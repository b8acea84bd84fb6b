// Stand-in for XLA's xla/backends/gpu/runtime/command_buffer_thunk.h: a command buffer thunk and
// the allocations its commands use (see ../../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_BUFFER_THUNK_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_BUFFER_THUNK_H_

#include <memory>
#include <utility>

#include "absl/types/span.h"
#include "xla/backends/gpu/runtime/command_executor.h"
#include "xla/backends/gpu/runtime/thunk.h"
#include "xla/service/buffer_assignment.h"

namespace xla::gpu {

// XLA's SequentialThunk (sequential_thunk.h), which the thunk keeps for profiling: none here.
class SequentialThunk {};

class CommandBufferThunk : public Thunk {
 public:
  CommandBufferThunk(CommandExecutor commands, ThunkInfo thunk_info,
                     std::unique_ptr<SequentialThunk> thunks = nullptr,
                     bool enable_command_buffers_during_profiling = false)
      : Thunk(kCommandBuffer, thunk_info), commands_(std::move(commands)) {
    (void)thunks;
    (void)enable_command_buffers_during_profiling;
  }

  absl::Span<const BufferAllocation::Index> allocs_indices() const {
    return commands_.allocs_indices();
  }

 private:
  CommandExecutor commands_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_BUFFER_THUNK_H_
