// Stand-in for XLA's xla/backends/gpu/runtime/command_state.h: state a command attaches to a
// command buffer, kept per (command, command buffer) by the state manager.
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_STATE_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_STATE_H_

#include <map>
#include <memory>
#include <utility>

#include "xla/stream_executor/command_buffer.h"

namespace xla::gpu {

class Command;

class CommandState {
 public:
  virtual ~CommandState() = default;
};

class CommandStateManager {
 public:
  template <typename T>
  T* GetOrNull(const Command* command, const stream_executor::CommandBuffer* command_buffer) {
    auto it = states_.find({command, command_buffer});
    return it == states_.end() ? nullptr : static_cast<T*>(it->second.get());
  }

  template <typename T, typename F>
  T* GetOrCreate(const Command* command, const stream_executor::CommandBuffer* command_buffer, F&& create) {
    if (T* state = GetOrNull<T>(command, command_buffer)) return state;
    std::unique_ptr<T> state = create();
    T* raw = state.get();
    states_[{command, command_buffer}] = std::move(state);
    return raw;
  }

 private:
  std::map<std::pair<const Command*, const stream_executor::CommandBuffer*>, std::unique_ptr<CommandState>>
      states_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_STATE_H_
