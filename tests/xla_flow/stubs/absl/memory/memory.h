// Test stand-in for absl::WrapUnique (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_MEMORY_MEMORY_H_
#define XLA_FLOW_STUB_ABSL_MEMORY_MEMORY_H_

#include <memory>

namespace absl {

template <typename T>
std::unique_ptr<T> WrapUnique(T* ptr) {
  return std::unique_ptr<T>(ptr);
}

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_MEMORY_MEMORY_H_
