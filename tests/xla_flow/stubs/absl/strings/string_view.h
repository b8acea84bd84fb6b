// Test stand-in for absl::string_view (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STRINGS_STRING_VIEW_H_
#define XLA_FLOW_STUB_ABSL_STRINGS_STRING_VIEW_H_

#include <string_view>

namespace absl {
using string_view = std::string_view;
}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_STRINGS_STRING_VIEW_H_
