// Stand-in for XLA's xla/backends/gpu/runtime/dynamic_slice_fusion_v2_thunk.h: a command of kind
// kDynamicSliceFusion constructed as XLA's is, whose embedded thunks are reachable only through
// thunks() (as in XLA, neither Thunk::Walk nor Command::Walk enters them).
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_DYNAMIC_SLICE_FUSION_V2_THUNK_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_DYNAMIC_SLICE_FUSION_V2_THUNK_H_

#include <utility>
#include <vector>

#include "xla/backends/gpu/runtime/command.h"
#include "xla/backends/gpu/runtime/thunk.h"
#include "xla/backends/gpu/runtime/thunk_executor.h"
#include "xla/backends/gpu/transforms/dynamic_slice_fusion.h"
#include "xla/service/buffer_assignment.h"

namespace xla::gpu {

class DynamicSliceFusionV2Thunk : public Command {
 public:
  DynamicSliceFusionV2Thunk(ThunkInfo, std::vector<DynamicSliceFusion::Parameter>,
                            std::vector<DynamicSliceFusion::Result>,
                            std::vector<BufferAllocation::Slice>,
                            std::vector<BufferAllocation::Slice>, std::vector<BufferAllocation>,
                            ThunkSequence embedded_thunks, bool = false)
      : Command(Thunk::kDynamicSliceFusion), executor_(std::move(embedded_thunks)) {}

  BufferUses buffer_uses() const override { return {}; }

  const ThunkSequence& thunks() const { return executor_.thunks(); }

 private:
  ThunkExecutor executor_;
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_RUNTIME_DYNAMIC_SLICE_FUSION_V2_THUNK_H_
