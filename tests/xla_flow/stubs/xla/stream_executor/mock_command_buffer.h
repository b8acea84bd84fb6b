// Test stand-in for XLA's se::MockCommandBuffer, over the stand-in se::CommandBuffer (see
// ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_COMMAND_BUFFER_H_

#include <gmock/gmock.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/stream_executor/command_buffer.h"

namespace stream_executor {

class MockCommandBuffer : public CommandBuffer {
 public:
  MOCK_METHOD(absl::StatusOr<const Command*>, CreateEmptyCmd,
              (absl::Span<const Command* const> dependencies, StreamPriority priority),
              (override));
  MOCK_METHOD(absl::StatusOr<const Command*>, CreateChildCommand,
              (const CommandBuffer& nested, absl::Span<const Command* const> dependencies),
              (override));
  MOCK_METHOD(absl::Status, UpdateChildCommand,
              (const Command* command, const CommandBuffer& nested), (override));
  MOCK_METHOD(absl::StatusOr<const Command*>, CreateMemcpyD2D,
              (DeviceAddressBase * dst, const DeviceAddressBase& src, uint64_t size,
               absl::Span<const Command* const> dependencies),
              (override));
  MOCK_METHOD(absl::Status, UpdateMemcpyD2D,
              (const Command* command, DeviceAddressBase* dst, const DeviceAddressBase& src,
               uint64_t size),
              (override));
  MOCK_METHOD(absl::StatusOr<const Command*>, CreateMemset,
              (DeviceAddressBase * dst, BitPattern bit_pattern, size_t num_elements,
               absl::Span<const Command* const> dependencies),
              (override));
  MOCK_METHOD(absl::Status, UpdateMemset,
              (const Command* command, DeviceAddressBase* dst, const BitPattern& bit_pattern,
               size_t num_elements),
              (override));
  MOCK_METHOD(absl::Status, Trace,
              (Stream * stream, absl::AnyInvocable<absl::Status(Stream*)> function), (override));
  MOCK_METHOD(absl::Status, SetPriority, (StreamPriority priority), (override));
  MOCK_METHOD(absl::Status, Submit, (Stream * stream), (override));
  MOCK_METHOD(absl::Status, Finalize, (), (override));
  MOCK_METHOD(absl::Status, Update, (), (override));
  MOCK_METHOD(Mode, mode, (), (const, override));
  MOCK_METHOD(State, state, (), (const, override));
  MOCK_METHOD(std::string, ToString, (), (const, override));
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_COMMAND_BUFFER_H_
