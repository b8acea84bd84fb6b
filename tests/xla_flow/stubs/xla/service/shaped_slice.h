// Test stand-in for xla::ShapedSlice, a slice and its shape (see ../../README.md).
#ifndef XLA_FLOW_STUB_XLA_SERVICE_SHAPED_SLICE_H_
#define XLA_FLOW_STUB_XLA_SERVICE_SHAPED_SLICE_H_

#include "xla/service/buffer_assignment.h"
#include "xla/shape.h"

namespace xla {

struct ShapedSlice {
  BufferAllocation::Slice slice;
  Shape shape;
};

}  // namespace xla

#endif  // XLA_FLOW_STUB_XLA_SERVICE_SHAPED_SLICE_H_
