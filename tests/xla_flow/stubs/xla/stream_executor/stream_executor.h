// Test stand-in for se::StreamExecutor: the operations the series' files and tests use, as XLA
// declares them (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_EXECUTOR_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_EXECUTOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "xla/stream_executor/device_address.h"
#include "xla/stream_executor/platform.h"
#include "xla/stream_executor/stream.h"

namespace stream_executor {

class StreamExecutor {
 public:
  virtual ~StreamExecutor() = default;
  virtual const Platform* GetPlatform() const = 0;
  virtual int device_ordinal() const { return -1; }
  // XLA's takes an optional priority, defaulted as here.
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual DeviceAddressBase Allocate(uint64_t size, int64_t memory_space) = 0;
  DeviceAddressBase Allocate(uint64_t size) { return Allocate(size, /*memory_space=*/0); }
  virtual void Deallocate(DeviceAddressBase* mem) = 0;
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_EXECUTOR_H_
