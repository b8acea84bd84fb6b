// Test stand-in for xla::gpu::BufferAllocations: the addresses of an execution's buffer
// allocations (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_SERVICE_GPU_BUFFER_ALLOCATIONS_H_
#define XLA_FLOW_STUB_XLA_SERVICE_GPU_BUFFER_ALLOCATIONS_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"
#include "xla/service/buffer_assignment.h"
#include "xla/stream_executor/device_address.h"

namespace xla::gpu {

class BufferAllocations {
 public:
  BufferAllocations(absl::Span<se::DeviceAddressBase const> buffers, int device_ordinal,
                    se::DeviceAddressAllocator* memory_allocator)
      : buffers_(buffers.begin(), buffers.end()),
        device_ordinal_(device_ordinal),
        memory_allocator_(memory_allocator) {}
  se::DeviceAddressBase GetDeviceAddress(BufferAllocation::Index buffer_index) const {
    return buffers_[buffer_index];
  }
  int device_ordinal() const { return device_ordinal_; }
  se::DeviceAddressAllocator* memory_allocator() const { return memory_allocator_; }
  size_t size() const { return buffers_.size(); }

 private:
  std::vector<se::DeviceAddressBase> buffers_;
  int device_ordinal_;
  se::DeviceAddressAllocator* memory_allocator_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_SERVICE_GPU_BUFFER_ALLOCATIONS_H_
