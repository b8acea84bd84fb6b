// Test stand-in for se::PlatformManager (see ../../../README.md): PlatformWithName("ROCM") is the
// software GPU (tests/hipsim's libamdhip64, dlopen'ed from XLA_FLOW_HIP, the file the library
// loads through RCB_HIP_LIBRARY, so both share one instance), one device, its streams and memory
// through HIP; NotFound where XLA_FLOW_HIP is unset or cannot be opened (a machine with a real
// GPU: the tests that need a platform skip there, as XLA's do without one).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_PLATFORM_MANAGER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_PLATFORM_MANAGER_H_

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/stream_executor/device_address.h"
#include "xla/stream_executor/platform.h"
#include "xla/stream_executor/rocm/rocm_platform_id.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace stream_executor {
namespace xla_flow {

// The software GPU's HIP functions the platform calls.
struct Hip {
  void* library = nullptr;
  template <typename F>
  F Sym(const char* name) const {
    return reinterpret_cast<F>(dlsym(library, name));
  }
  static absl::Status Check(int error, const char* what) {
    return error == 0 ? absl::OkStatus() : absl::InternalError(what);
  }
};

class SoftwareGpuStream : public Stream {
 public:
  SoftwareGpuStream(const Hip& hip, StreamExecutor* parent, void* stream)
      : hip_(hip), parent_(parent), stream_(stream) {}
  ~SoftwareGpuStream() override { hip_.Sym<int (*)(void*)>("hipStreamDestroy")(stream_); }
  PlatformSpecificHandle platform_specific_handle() const override { return {stream_}; }
  absl::Status Memcpy(void* host_dst, const DeviceAddressBase& gpu_src, uint64_t size) override {
    return Copy(host_dst, gpu_src.opaque(), size, /*hipMemcpyDeviceToHost=*/2);
  }
  absl::Status Memcpy(DeviceAddressBase* gpu_dst, const void* host_src, uint64_t size) override {
    return Copy(gpu_dst->opaque(), host_src, size, /*hipMemcpyHostToDevice=*/1);
  }
  absl::Status Memcpy(DeviceAddressBase* gpu_dst, const DeviceAddressBase& gpu_src,
                      uint64_t size) override {
    return Copy(gpu_dst->opaque(), gpu_src.opaque(), size, /*hipMemcpyDeviceToDevice=*/3);
  }
  absl::Status BlockHostUntilDone() override {
    return Hip::Check(hip_.Sym<int (*)(void*)>("hipStreamSynchronize")(stream_),
                      "hipStreamSynchronize");
  }
  // hipLaunchHostFunc, the callback's status dropped (XLA's ROCm stream logs it).
  absl::Status DoHostCallbackWithStatus(
      absl::AnyInvocable<absl::Status() &&> callback) override {
    using Callback = absl::AnyInvocable<absl::Status() &&>;
    auto* held = new Callback(std::move(callback));
    void (*run)(void*) = [](void* data) {
      Callback* callback = static_cast<Callback*>(data);
      (void)std::move(*callback)();
      delete callback;
    };
    int error = hip_.Sym<int (*)(void*, void (*)(void*), void*)>("hipLaunchHostFunc")(
        stream_, run, held);
    if (error != 0) delete held;
    return Hip::Check(error, "hipLaunchHostFunc");
  }
  StreamExecutor* parent() const override { return parent_; }

 private:
  absl::Status Copy(void* dst, const void* src, uint64_t size, int kind) {
    return Hip::Check(hip_.Sym<int (*)(void*, const void*, size_t, int, void*)>(
                          "hipMemcpyAsync")(dst, src, size, kind, stream_),
                      "hipMemcpyAsync");
  }
  const Hip& hip_;
  StreamExecutor* parent_;
  void* stream_;
};

class SoftwareGpuExecutor : public StreamExecutor {
 public:
  SoftwareGpuExecutor(const Hip& hip, const Platform* platform) : hip_(hip), platform_(platform) {}
  const Platform* GetPlatform() const override { return platform_; }
  int device_ordinal() const override { return 0; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    void* stream = nullptr;
    absl::Status made =
        Hip::Check(hip_.Sym<int (*)(void**)>("hipStreamCreate")(&stream), "hipStreamCreate");
    if (!made.ok()) return made;
    return std::unique_ptr<Stream>(new SoftwareGpuStream(hip_, this, stream));
  }
  DeviceAddressBase Allocate(uint64_t size, int64_t memory_space) override {
    void* ptr = nullptr;
    if (memory_space != 0 || hip_.Sym<int (*)(void**, size_t)>("hipMalloc")(&ptr, size) != 0) {
      return DeviceAddressBase();
    }
    return DeviceAddressBase(ptr, size);
  }
  void Deallocate(DeviceAddressBase* mem) override {
    hip_.Sym<int (*)(void*)>("hipFree")(mem->opaque());
    *mem = DeviceAddressBase();
  }

 private:
  const Hip& hip_;
  const Platform* platform_;
};

class SoftwareGpuPlatform : public Platform {
 public:
  explicit SoftwareGpuPlatform(void* library) : executor_(hip_, this) { hip_.library = library; }
  PlatformId id() const override { return rocm::kROCmPlatformId; }
  const std::string& Name() const override { return name_; }
  int VisibleDeviceCount() const override {
    int count = 0;
    return hip_.Sym<int (*)(int*)>("hipGetDeviceCount")(&count) == 0 ? count : 0;
  }
  absl::StatusOr<StreamExecutor*> ExecutorForDevice(int ordinal) override {
    if (ordinal != 0) return absl::NotFoundError("the software GPU has one device here");
    return static_cast<StreamExecutor*>(&executor_);
  }

 private:
  Hip hip_;
  std::string name_ = "ROCM";
  SoftwareGpuExecutor executor_;
};

}  // namespace xla_flow

class PlatformManager {
 public:
  static absl::StatusOr<Platform*> PlatformWithName(absl::string_view target) {
    static xla_flow::SoftwareGpuPlatform* platform = []() -> xla_flow::SoftwareGpuPlatform* {
      const char* path = std::getenv("XLA_FLOW_HIP");
      void* library = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : nullptr;
      if (library == nullptr) return nullptr;
      if (reinterpret_cast<int (*)(int)>(dlsym(library, "hipSetDevice"))(0) != 0) return nullptr;
      return new xla_flow::SoftwareGpuPlatform(library);
    }();
    if (target != "ROCM" || platform == nullptr) {
      return absl::NotFoundError("no software GPU (XLA_FLOW_HIP) for this platform");
    }
    return static_cast<Platform*>(platform);
  }
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_PLATFORM_MANAGER_H_
