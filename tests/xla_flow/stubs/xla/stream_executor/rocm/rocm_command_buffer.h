// Test stand-in for XLA's RocmCommandBuffer, declared only as far as rocm_cmdbuf_command_buffer.cc
// uses it: the graph() accessor 0003 adds, through which a rocm_cmdbuf parent clones XLA's own
// nested command buffer. No test makes one (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_COMMAND_BUFFER_H_

#include "rocm/include/hip/hip_runtime.h"
#include "xla/stream_executor/gpu/gpu_command_buffer.h"

namespace stream_executor::gpu {

class RocmCommandBuffer : public GpuCommandBuffer {
 public:
  hipGraph_t graph() const { return graph_; }

 private:
  hipGraph_t graph_ = nullptr;
};

}  // namespace stream_executor::gpu

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_ROCM_ROCM_COMMAND_BUFFER_H_
