// Test stand-in for XLA's RocmKernel: a kernel with its HIP function (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_KERNEL_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_KERNEL_H_

#include "rocm/include/hip/hip_runtime.h"
#include "xla/stream_executor/kernel.h"

namespace stream_executor::gpu {

class RocmKernel : public Kernel {
 public:
  hipFunction_t gpu_function() const { return rocm_function_; }
  void set_gpu_function(hipFunction_t rocm_function) { rocm_function_ = rocm_function; }

 private:
  hipFunction_t rocm_function_ = nullptr;
};

}  // namespace stream_executor::gpu

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_KERNEL_H_
