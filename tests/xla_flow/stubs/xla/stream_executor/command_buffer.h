// Test stand-in for se::CommandBuffer: its state only, the one member the series' helpers
// read (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_

namespace stream_executor {

class CommandBuffer {
 public:
  enum class State { kCreate, kUpdate, kFinalized };
  virtual ~CommandBuffer() = default;
  virtual State state() const = 0;
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_
