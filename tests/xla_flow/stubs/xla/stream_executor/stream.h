// Test stand-in for se::Stream: the operations the series' files and tests use, as XLA declares
// them (see ../../../README.md); ../platform_manager.h's software GPU platform implements them.
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_H_

#include <cstdint>

#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "xla/stream_executor/device_address.h"

namespace stream_executor {

class StreamExecutor;

class Stream {
 public:
  struct PlatformSpecificHandle {
    void* stream = nullptr;
  };

  virtual ~Stream() = default;
  virtual PlatformSpecificHandle platform_specific_handle() const = 0;
  virtual absl::Status Memcpy(void* host_dst, const DeviceAddressBase& gpu_src, uint64_t size) = 0;
  virtual absl::Status Memcpy(DeviceAddressBase* gpu_dst, const void* host_src, uint64_t size) = 0;
  virtual absl::Status Memcpy(DeviceAddressBase* gpu_dst, const DeviceAddressBase& gpu_src,
                              uint64_t size) = 0;
  absl::Status MemcpyD2D(DeviceAddressBase* gpu_dst, const DeviceAddressBase& gpu_src,
                         uint64_t size) {
    return Memcpy(gpu_dst, gpu_src, size);
  }
  virtual absl::Status BlockHostUntilDone() = 0;
  // As XLA's: the callback runs on the host once the work enqueued before it has finished.
  absl::Status DoHostCallback(absl::AnyInvocable<void() &&> callback) {
    return DoHostCallbackWithStatus([cb = std::move(callback)]() mutable {
      std::move(cb)();
      return absl::OkStatus();
    });
  }
  virtual absl::Status DoHostCallbackWithStatus(
      absl::AnyInvocable<absl::Status() &&> callback) = 0;
  virtual StreamExecutor* parent() const = 0;
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_H_
