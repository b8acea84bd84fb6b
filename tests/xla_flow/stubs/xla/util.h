// Stand-in for XLA's xla/util.h: the Internal error constructor, for a message without arguments.
#ifndef XLA_FLOW_STUB_XLA_UTIL_H_
#define XLA_FLOW_STUB_XLA_UTIL_H_

#include <string_view>

#include "absl/status/status.h"

namespace xla {

inline absl::Status Internal(std::string_view message) { return absl::InternalError(message); }

}  // namespace xla

#endif  // XLA_FLOW_STUB_XLA_UTIL_H_
