// Test stand-in for XLA's xla/stream_executor/rocm/rocm_platform_id.h (see ../../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_PLATFORM_ID_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_PLATFORM_ID_H_

#include "xla/stream_executor/platform.h"

namespace stream_executor::rocm {

inline const PlatformIdInfo kROCmPlatformIdInfo{};
inline const PlatformId kROCmPlatformId = &kROCmPlatformIdInfo;

}  // namespace stream_executor::rocm

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_PLATFORM_ID_H_
