// Test stand-in for Abseil's status matchers (absl_testing::IsOk, IsOkAndHolds,
// StatusIs), as gMock matchers (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STATUS_STATUS_MATCHERS_H_
#define XLA_FLOW_STUB_ABSL_STATUS_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace absl_testing {
namespace internal {
inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}
}  // namespace internal

MATCHER(IsOk, "is OK") {
  const absl::Status& status = internal::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.ok();
}

MATCHER_P(IsOkAndHolds, matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "whose status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(matcher, *arg, result_listener);
}

MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(static_cast<int>(code))) {
  const absl::Status& status = internal::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.code() == code;
}

}  // namespace absl_testing

#endif  // XLA_FLOW_STUB_ABSL_STATUS_STATUS_MATCHERS_H_
