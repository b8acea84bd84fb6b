// Stand-in for XLA's xla/backends/gpu/runtime/command_executor.h: a sequence of commands walked
// one by one, and whether it must be updated at initialization.
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_EXECUTOR_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_EXECUTOR_H_

#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "xla/backends/gpu/runtime/command.h"

namespace xla::gpu {

class CommandExecutor {
 public:
  explicit CommandExecutor(std::vector<const Command*> commands,
                           bool requires_update_on_initialize = false)
      : commands_(std::move(commands)),
        requires_update_on_initialize_(requires_update_on_initialize) {}

  bool requires_update_on_initialize() const { return requires_update_on_initialize_; }

  absl::Status Walk(absl::FunctionRef<absl::Status(const Command*)> callback) const {
    for (const Command* command : commands_) {
      absl::Status status = callback(command);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<const Command*> commands_;
  bool requires_update_on_initialize_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_EXECUTOR_H_
