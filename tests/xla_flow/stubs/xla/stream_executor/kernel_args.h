// Test stand-in for se::KernelArgs and se::KernelArgsDeviceAddressArray (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_ARGS_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_ARGS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "xla/stream_executor/device_address.h"

namespace stream_executor {

class KernelArgs {
 public:
  enum class Kind { kDeviceAddressArray, kPackedArray };
  virtual ~KernelArgs() = default;
  virtual size_t number_of_arguments() const = 0;
  virtual uint64_t number_of_shared_bytes() const = 0;
  virtual Kind kind() const = 0;
};

class KernelArgsDeviceAddressArray : public KernelArgs {
 public:
  KernelArgsDeviceAddressArray(absl::Span<const DeviceAddressBase> args, size_t shared_memory_bytes)
      : args_(args.begin(), args.end()), shared_memory_bytes_(shared_memory_bytes) {}
  size_t number_of_arguments() const override { return args_.size() + (shared_memory_bytes_ > 0); }
  uint64_t number_of_shared_bytes() const override { return shared_memory_bytes_; }
  Kind kind() const override { return Kind::kDeviceAddressArray; }

 private:
  std::vector<DeviceAddressBase> args_;
  size_t shared_memory_bytes_;
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_ARGS_H_
