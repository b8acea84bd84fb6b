// Test stand-in for XLA's se::MockCommandBuffer, over the stand-in se::CommandBuffer (see
// ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_COMMAND_BUFFER_H_

#include <gmock/gmock.h>

#include "xla/stream_executor/command_buffer.h"

namespace stream_executor {

class MockCommandBuffer : public CommandBuffer {
 public:
  MOCK_METHOD(State, state, (), (const, override));
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_COMMAND_BUFFER_H_
