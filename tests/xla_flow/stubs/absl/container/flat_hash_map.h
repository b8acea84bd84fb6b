// Test stand-in for absl::flat_hash_map (std::unordered_map) and absl::erase_if on it (see
// ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_CONTAINER_FLAT_HASH_MAP_H_
#define XLA_FLOW_STUB_ABSL_CONTAINER_FLAT_HASH_MAP_H_

#include <cstddef>
#include <unordered_map>

namespace absl {

template <typename K, typename V>
using flat_hash_map = std::unordered_map<K, V>;

template <typename K, typename V, typename Predicate>
size_t erase_if(std::unordered_map<K, V>& map, Predicate pred) {
  size_t erased = 0;
  for (auto it = map.begin(); it != map.end();) {
    if (pred(*it)) {
      it = map.erase(it);
      ++erased;
    } else {
      ++it;
    }
  }
  return erased;
}

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_CONTAINER_FLAT_HASH_MAP_H_
