// Test stand-in for se::CommandBuffer: its state, which the series' helpers read, and the child
// command operations that the trace cache's RecordNestedCommand calls (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace stream_executor {

class CommandBuffer {
 public:
  enum class State { kCreate, kUpdate, kFinalized };
  // A recorded command; opaque to its users.
  class Command {
   public:
    virtual ~Command() = default;
  };
  virtual ~CommandBuffer() = default;
  virtual State state() const = 0;
  // Not recorded by the tests that use this stand-in: an error if called.
  virtual absl::StatusOr<const Command*> CreateChildCommand(
      const CommandBuffer& nested, absl::Span<const Command* const> dependencies) {
    (void)nested;
    (void)dependencies;
    return absl::InternalError("CreateChildCommand is not modelled");
  }
  virtual absl::Status UpdateChildCommand(const Command* command, const CommandBuffer& nested) {
    (void)command;
    (void)nested;
    return absl::InternalError("UpdateChildCommand is not modelled");
  }
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_
