// Test stand-in for absl::flat_hash_set: std::unordered_set with contains() (see
// ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_CONTAINER_FLAT_HASH_SET_H_
#define XLA_FLOW_STUB_ABSL_CONTAINER_FLAT_HASH_SET_H_

#include <unordered_set>

namespace absl {

template <typename T>
class flat_hash_set : public std::unordered_set<T> {
 public:
  bool contains(const T& value) const { return this->count(value) != 0; }
};

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_CONTAINER_FLAT_HASH_SET_H_
