// Stand-in for XLA's xla/backends/gpu/transforms/dynamic_slice_fusion.h: the parameter and result
// descriptions a dynamic slice fusion thunk is constructed with (as the struct XLA declares, with
// only the member the tests never set).
#ifndef XLA_FLOW_STUB_XLA_BACKENDS_GPU_TRANSFORMS_DYNAMIC_SLICE_FUSION_H_
#define XLA_FLOW_STUB_XLA_BACKENDS_GPU_TRANSFORMS_DYNAMIC_SLICE_FUSION_H_

#include <cstdint>

namespace xla::gpu {

struct DynamicSliceFusion {
  struct Parameter {
    int64_t parameter_number = 0;
  };
  struct Result {
    int64_t result_number = 0;
  };
};

}  // namespace xla::gpu

#endif  // XLA_FLOW_STUB_XLA_BACKENDS_GPU_TRANSFORMS_DYNAMIC_SLICE_FUSION_H_
