// Test stand-in for se::gpu::GpuCommandBuffer: only its node handle type, which the bridge
// converts (see ../../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_GPU_GPU_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_GPU_GPU_COMMAND_BUFFER_H_

namespace stream_executor::gpu {

class GpuCommandBuffer {
 public:
  struct GraphNodeHandleOpaque;
  using GraphNodeHandle = GraphNodeHandleOpaque*;
};

}  // namespace stream_executor::gpu

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_GPU_GPU_COMMAND_BUFFER_H_
