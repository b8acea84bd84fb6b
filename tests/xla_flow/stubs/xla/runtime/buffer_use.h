// Stand-in for XLA's xla/runtime/buffer_use.h: a command's use of a buffer slice (its kind of
// access and shape are not kept).
#ifndef XLA_FLOW_STUB_XLA_RUNTIME_BUFFER_USE_H_
#define XLA_FLOW_STUB_XLA_RUNTIME_BUFFER_USE_H_

#include "xla/service/buffer_assignment.h"
#include "xla/shape.h"

namespace xla {

class BufferUse {
 public:
  explicit BufferUse(BufferAllocation::Slice slice) : slice_(slice) {}
  static BufferUse Read(BufferAllocation::Slice slice, Shape) { return BufferUse(slice); }
  static BufferUse Write(BufferAllocation::Slice slice, Shape) { return BufferUse(slice); }
  const BufferAllocation::Slice& slice() const { return slice_; }

 private:
  BufferAllocation::Slice slice_;
};

}  // namespace xla

#endif  // XLA_FLOW_STUB_XLA_RUNTIME_BUFFER_USE_H_
