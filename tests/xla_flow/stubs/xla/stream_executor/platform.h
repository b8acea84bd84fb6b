// Test stand-in for se::Platform and its id (XLA's platform.h and platform_id.h; see
// ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_PLATFORM_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_PLATFORM_H_

#include <string>

#include "absl/status/statusor.h"

namespace stream_executor {

class StreamExecutor;

enum class StreamPriority { Default = 0, Lowest, Highest };

struct PlatformIdInfo {};
using PlatformId = const PlatformIdInfo*;

class Platform {
 public:
  virtual ~Platform() = default;
  virtual PlatformId id() const = 0;
  virtual const std::string& Name() const = 0;
  virtual int VisibleDeviceCount() const = 0;
  virtual absl::StatusOr<StreamExecutor*> ExecutorForDevice(int ordinal) = 0;
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_PLATFORM_H_
