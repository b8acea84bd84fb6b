// Test stand-in for absl::AnyInvocable: an owned callable, here std::function (the callables
// the tests pass are copyable; see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_FUNCTIONAL_ANY_INVOCABLE_H_
#define XLA_FLOW_STUB_ABSL_FUNCTIONAL_ANY_INVOCABLE_H_

#include <functional>

namespace absl {

template <typename Signature>
using AnyInvocable = std::function<Signature>;

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_FUNCTIONAL_ANY_INVOCABLE_H_
