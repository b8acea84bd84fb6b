// Stand-in for XLA's xla/backends/gpu/runtime/command_executor.h: a sequence of commands walked
// one by one, the allocations they use, and whether it must be updated at initialization.
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_EXECUTOR_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_EXECUTOR_H_

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xla/backends/gpu/runtime/command.h"
#include "xla/service/buffer_assignment.h"

namespace xla::gpu {

class CommandExecutor {
 public:
  enum class SynchronizationMode { kSerialize, kConcurrent, kLHS, kConcurrentRegions };

  CommandExecutor() = default;
  CommandExecutor(CommandExecutor&&) = default;
  CommandExecutor& operator=(CommandExecutor&&) = default;

  // Every allocation the commands use, sorted, as XLA's collects them.
  static absl::StatusOr<CommandExecutor> Create(CommandSequence commands,
                                                SynchronizationMode synchronization_mode) {
    (void)synchronization_mode;
    CommandExecutor executor;
    for (const Command* command : commands) {
      for (const BufferUse& use : command->buffer_uses()) {
        executor.allocs_indices_.push_back(use.slice().index());
      }
    }
    std::sort(executor.allocs_indices_.begin(), executor.allocs_indices_.end());
    executor.allocs_indices_.erase(
        std::unique(executor.allocs_indices_.begin(), executor.allocs_indices_.end()),
        executor.allocs_indices_.end());
    executor.commands_ = std::make_unique<CommandSequence>(std::move(commands));
    return executor;
  }

  bool requires_update_on_initialize() const { return false; }

  absl::Span<const BufferAllocation::Index> allocs_indices() const { return allocs_indices_; }

  absl::Status Walk(absl::FunctionRef<absl::Status(const Command*)> callback) const {
    if (commands_ == nullptr) return absl::OkStatus();
    for (const Command* command : *commands_) {
      absl::Status status = callback(command);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<CommandSequence> commands_;
  std::vector<BufferAllocation::Index> allocs_indices_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_EXECUTOR_H_
