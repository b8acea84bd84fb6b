// Test stand-in for XLA's xla/tsl/platform/statusor.h: TF_ASSERT_OK_AND_ASSIGN, as its test
// macros define it (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_TSL_PLATFORM_STATUSOR_H_
#define XLA_FLOW_STUB_XLA_TSL_PLATFORM_STATUSOR_H_

#include <utility>

#include "absl/status/statusor.h"

#define XLA_FLOW_TF_CONCAT_INNER(a, b) a##b
#define XLA_FLOW_TF_CONCAT(a, b) XLA_FLOW_TF_CONCAT_INNER(a, b)
#define TF_ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  XLA_FLOW_TF_ASSERT_OK_AND_ASSIGN(XLA_FLOW_TF_CONCAT(statusor_, __LINE__), lhs, rexpr)
#define XLA_FLOW_TF_ASSERT_OK_AND_ASSIGN(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                     \
  ASSERT_TRUE(statusor.ok()) << statusor.status();             \
  lhs = std::move(statusor.value())

#endif  // XLA_FLOW_STUB_XLA_TSL_PLATFORM_STATUSOR_H_
