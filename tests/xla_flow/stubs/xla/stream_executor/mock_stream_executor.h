// Test stand-in for XLA's se::MockStreamExecutor, over the stand-in se::StreamExecutor (see
// ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_STREAM_EXECUTOR_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_STREAM_EXECUTOR_H_

#include <gmock/gmock.h>

#include <cstdint>
#include <memory>

#include "xla/stream_executor/stream_executor.h"

namespace stream_executor {

class MockStreamExecutor : public StreamExecutor {
 public:
  MOCK_METHOD(const Platform*, GetPlatform, (), (const, override));
  MOCK_METHOD(int, device_ordinal, (), (const, override));
  MOCK_METHOD(absl::StatusOr<std::unique_ptr<Stream>>, CreateStream, (), (override));
  MOCK_METHOD(DeviceAddressBase, Allocate, (uint64_t size, int64_t memory_space), (override));
  MOCK_METHOD(void, Deallocate, (DeviceAddressBase * mem), (override));
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_MOCK_STREAM_EXECUTOR_H_
