// Test stand-in for absl::StatusOr: a value or an error status (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STATUS_STATUSOR_H_
#define XLA_FLOW_STUB_ABSL_STATUS_STATUSOR_H_

#include <optional>
#include <utility>

#include "absl/status/status.h"

namespace absl {

template <typename T>
class StatusOr {
 public:
  StatusOr() : status_(StatusCode::kUnknown, "no value") {}
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit, as absl's
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const { return *value_; }
  T& value() { return *value_; }
  const T& operator*() const { return *value_; }
  T& operator*() { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_STATUS_STATUSOR_H_
