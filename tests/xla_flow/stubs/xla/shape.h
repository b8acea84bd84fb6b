// Test stand-in for xla::Shape, which the series' helpers carry but never read (see
// ../README.md).
#ifndef XLA_FLOW_STUB_XLA_SHAPE_H_
#define XLA_FLOW_STUB_XLA_SHAPE_H_

namespace xla {
class Shape {};
}  // namespace xla

#endif  // XLA_FLOW_STUB_XLA_SHAPE_H_
