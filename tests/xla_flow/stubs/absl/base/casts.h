// Test stand-in for absl::down_cast: a static_cast to a derived pointer or reference (see
// ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_BASE_CASTS_H_
#define XLA_FLOW_STUB_ABSL_BASE_CASTS_H_

namespace absl {

template <typename To, typename From>
To down_cast(From* f) {
  return static_cast<To>(f);
}

template <typename To, typename From>
To down_cast(From& f) {
  return static_cast<To>(f);
}

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_BASE_CASTS_H_
