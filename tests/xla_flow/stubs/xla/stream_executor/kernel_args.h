// Test stand-in for se::KernelArgs, se::KernelArgsDeviceAddressArray and se::KernelArgsPackedArray
// with its packed arguments (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_ARGS_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_ARGS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
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

struct PackedArgBase {
  virtual ~PackedArgBase() = default;
  virtual void* argument_address() = 0;
  virtual int64_t size() const = 0;
};

class PackableKernelArgs {
 public:
  virtual ~PackableKernelArgs() = default;
  virtual absl::Span<const std::unique_ptr<PackedArgBase>> packed_args() const = 0;
};

class KernelArgsPackedArrayBase : public KernelArgs {
 public:
  Kind kind() const final { return Kind::kPackedArray; }
  virtual absl::Span<const void* const> argument_addresses() const = 0;
};

// As XLA's: how add_argument(const T&) packs an argument. A POD by value; a typed device address
// (DeviceAddress<T>) as its T*, not recorded as a device address.
template <typename T>
struct KernelArgPacking {
  static_assert(!std::is_pointer_v<T>, "cannot pass raw pointer to the device");
  using Type = T;
  static Type Pack(const T& arg) { return arg; }
};

template <typename T>
struct KernelArgPacking<DeviceAddress<T>> {
  using Type = T*;
  static T* Pack(const DeviceAddress<T> addr) { return addr.base(); }
};

template <>
struct KernelArgPacking<const DeviceAddressBase*> {
  using Type = void*;
  static void* Pack(const DeviceAddressBase* addr) { return addr->opaque(); }
};

// As XLA's: a hidden POD's bytes, passed by value.
class PackedKernelArg {
 public:
  // XLA's takes an absl::FunctionRef<void(absl::Span<char>)>; the same callers compile here.
  template <typename Initializer>
  PackedKernelArg(size_t size_bytes, Initializer initialize) : storage_(size_bytes) {
    initialize(absl::MakeSpan(storage_));
  }
  void* data() { return storage_.data(); }
  size_t size_bytes() const { return storage_.size(); }

 private:
  std::vector<char> storage_;
};

namespace internal {

template <typename Packed>
struct PackedArg final : PackedArgBase {
  static_assert(std::is_trivially_copyable_v<Packed>, "Packed type must be trivially copyable");
  explicit PackedArg(Packed packed_arg) : packed_arg(std::move(packed_arg)) {}
  void* argument_address() final { return &packed_arg; }
  int64_t size() const final { return sizeof(Packed); }
  Packed packed_arg;
};

template <>
struct PackedArg<PackedKernelArg> : PackedArgBase {
  explicit PackedArg(PackedKernelArg packed_arg) : packed_arg(std::move(packed_arg)) {}
  void* argument_address() final { return packed_arg.data(); }
  int64_t size() const final { return static_cast<int64_t>(packed_arg.size_bytes()); }
  PackedKernelArg packed_arg;
};

template <typename T>
PackedArg(T) -> PackedArg<T>;

}  // namespace internal

// As XLA's: POD arguments packed by value (KernelArgPacking), device addresses as their pointer
// (internal::PackedArg<void*>, recorded in device_addr_args()), a PackedKernelArg as its bytes,
// each kept in a packed argument of its own whose address is the argument's.
class KernelArgsPackedArray : public KernelArgsPackedArrayBase, public PackableKernelArgs {
 public:
  explicit KernelArgsPackedArray(size_t num_args) {
    device_addr_args_.reserve(num_args);
    argument_addresses_.reserve(num_args);
  }
  KernelArgsPackedArray(const KernelArgsPackedArray&) = delete;
  KernelArgsPackedArray& operator=(const KernelArgsPackedArray&) = delete;

  void add_argument(PackedKernelArg arg) {
    auto& emplaced = packed_args_.emplace_back(new internal::PackedArg(std::move(arg)));
    argument_addresses_.push_back(emplaced->argument_address());
  }
  template <typename T>
  void add_argument(const T& arg) {
    auto& emplaced = packed_args_.emplace_back(new internal::PackedArg(KernelArgPacking<T>::Pack(arg)));
    argument_addresses_.push_back(emplaced->argument_address());
  }
  void add_argument(const DeviceAddressBase& arg) {
    device_addr_args_.emplace_back(arg.opaque());
    auto& emplaced = packed_args_.emplace_back(
        new internal::PackedArg(KernelArgPacking<const DeviceAddressBase*>::Pack(&arg)));
    argument_addresses_.push_back(emplaced->argument_address());
  }
  void add_shared_bytes(size_t number_of_bytes) { shared_memory_bytes_ += number_of_bytes; }

  absl::Span<void*> device_addr_args() { return absl::MakeSpan(device_addr_args_); }
  size_t number_of_arguments() const override {
    return argument_addresses_.size() + (shared_memory_bytes_ > 0);
  }
  uint64_t number_of_shared_bytes() const override { return shared_memory_bytes_; }
  absl::Span<const void* const> argument_addresses() const final { return argument_addresses_; }
  absl::Span<const std::unique_ptr<PackedArgBase>> packed_args() const final { return packed_args_; }

 private:
  std::vector<std::unique_ptr<PackedArgBase>> packed_args_;
  std::vector<const void*> argument_addresses_;
  std::vector<void*> device_addr_args_;
  size_t shared_memory_bytes_ = 0;
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_ARGS_H_
