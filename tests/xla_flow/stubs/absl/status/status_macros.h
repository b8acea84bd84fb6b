// Test stand-in for Abseil's status macros (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STATUS_STATUS_MACROS_H_
#define XLA_FLOW_STUB_ABSL_STATUS_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ABSL_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::absl::Status xla_flow_status_ = (expr);       \
    if (!xla_flow_status_.ok()) return xla_flow_status_; \
  } while (0)

#define XLA_FLOW_CONCAT_INNER(a, b) a##b
#define XLA_FLOW_CONCAT(a, b) XLA_FLOW_CONCAT_INNER(a, b)
#define ABSL_ASSIGN_OR_RETURN(lhs, rexpr) \
  XLA_FLOW_ASSIGN_OR_RETURN(XLA_FLOW_CONCAT(xla_flow_statusor_, __LINE__), lhs, rexpr)
#define XLA_FLOW_ASSIGN_OR_RETURN(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(statusor.value())

#endif  // XLA_FLOW_STUB_ABSL_STATUS_STATUS_MACROS_H_
