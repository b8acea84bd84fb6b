// Test stand-in for XLA's rocm_status.h: a HIP error as an absl::Status (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_STATUS_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "rocm/include/hip/hip_runtime.h"

namespace stream_executor::gpu {

inline absl::Status ToStatus(hipError_t result, absl::string_view detail = "") {
  if (result == hipSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(std::string(detail), ": HIP error ", static_cast<int>(result)));
}

}  // namespace stream_executor::gpu

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_STATUS_H_
