// Stand-in for XLA's xla/backends/gpu/runtime/command.h: a command of a given thunk kind with the
// buffers it uses, and the record parameters and actions.
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_H_

#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "absl/types/span.h"
#include "xla/backends/gpu/runtime/command_state.h"
#include "xla/backends/gpu/runtime/thunk.h"
#include "xla/runtime/buffer_use.h"
#include "xla/service/buffer_assignment.h"
#include "xla/shape.h"
#include "xla/stream_executor/command_buffer.h"

namespace xla::gpu {

class Command : public Thunk {
 public:
  using BufferUses = std::vector<BufferUse>;

  explicit Command(Thunk::Kind kind = Thunk::kCommand) : Thunk(kind) {}

  struct RecordParams {
    CommandStateManager& state;
    std::optional<std::vector<BufferAllocation::Index>> updated_allocs;
    bool is_initialization = false;
  };
  struct RecordCreate {
    absl::Span<const se::CommandBuffer::Command* const> dependencies;
  };
  struct RecordUpdate {
    const se::CommandBuffer::Command* command;
  };
  using RecordAction = std::variant<RecordCreate, RecordUpdate>;

  virtual BufferUses buffer_uses() const = 0;  // pure, as Thunk::buffer_uses is in XLA
};

// The commands of a command buffer thunk, owned or borrowed.
class CommandSequence : public std::vector<Command*> {
 public:
  void Append(std::unique_ptr<Command> command) {
    this->push_back(command.get());
    owned_.push_back(std::move(command));
  }
  void Append(Command* command) { this->push_back(command); }

 private:
  std::vector<std::unique_ptr<Command>> owned_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_COMMAND_H_
