// Test stand-in for se::DeviceAddressBase, an address and a size (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_DEVICE_ADDRESS_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_DEVICE_ADDRESS_H_

#include <cstdint>

namespace stream_executor {

class DeviceAddressBase {
 public:
  explicit DeviceAddressBase(void* opaque = nullptr, uint64_t size = 0) : opaque_(opaque), size_(size) {}
  void* opaque() const { return opaque_; }
  uint64_t size() const { return size_; }
  bool is_null() const { return opaque_ == nullptr; }
  bool operator==(const DeviceAddressBase& other) const {
    return opaque_ == other.opaque_ && size_ == other.size_;
  }

 private:
  void* opaque_;
  uint64_t size_;
};

// As XLA's: a typed device address, which KernelArgsPackedArray packs as its `ElemT*`. As in
// XLA, the constructor from an address and a byte size is protected: MakeFromByteSize names it.
template <typename ElemT>
class DeviceAddress final : public DeviceAddressBase {
 public:
  DeviceAddress() : DeviceAddressBase(nullptr, 0) {}
  static DeviceAddress<ElemT> MakeFromByteSize(void* opaque, uint64_t bytes) { return DeviceAddress<ElemT>(opaque, bytes); }
  ElemT* base() const { return static_cast<ElemT*>(opaque()); }

 protected:
  DeviceAddress(void* opaque, uint64_t size) : DeviceAddressBase(opaque, size) {}
};

class DeviceAddressAllocator;

}  // namespace stream_executor

// XLA declares this alias in xla/tsl/platform/types.h, which its headers reach.
namespace se = ::stream_executor;

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_DEVICE_ADDRESS_H_
