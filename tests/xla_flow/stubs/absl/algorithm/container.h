// Test stand-in for Abseil's container algorithms (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_ALGORITHM_CONTAINER_H_
#define XLA_FLOW_STUB_ABSL_ALGORITHM_CONTAINER_H_

#include <algorithm>

namespace absl {
template <typename C>
void c_sort(C& c) {
  std::sort(c.begin(), c.end());
}
}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_ALGORITHM_CONTAINER_H_
