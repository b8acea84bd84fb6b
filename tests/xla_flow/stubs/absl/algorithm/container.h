// Test stand-in for Abseil's container algorithms (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_ALGORITHM_CONTAINER_H_
#define XLA_FLOW_STUB_ABSL_ALGORITHM_CONTAINER_H_

#include <algorithm>

namespace absl {
template <typename C>
void c_sort(C& c) {
  std::sort(c.begin(), c.end());
}
template <typename C, typename T>
bool c_binary_search(const C& c, const T& value) {
  return std::binary_search(c.begin(), c.end(), value);
}
template <typename C1, typename C2>
bool c_equal(const C1& c1, const C2& c2) {
  return std::equal(c1.begin(), c1.end(), c2.begin(), c2.end());
}
}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_ALGORITHM_CONTAINER_H_
